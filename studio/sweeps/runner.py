"""The one sweep helper: a group in the run log, every configuration timed in interleaved rounds, each logged.

Compare, Ladder, Auto-tune and the distributed sweeps all go through `run_sweep`:

1. refuse, before anything runs, a sweep whose private pipelines would not fit in memory;
2. open a group and log every configuration as a `running` run;
3. warm every configuration up, then time it once per round, A B C, A B C, ... (`studio.measure.protocol`);
4. log each configuration with its latencies, its per-round speedup against the baseline (median, min-max,
   verdict), how busy the host was, and its image's difference from the baseline's;
5. close the group as ok, failed or cancelled, on every path. A configuration that fails becomes a failed
   run and leaves the later rounds; a failing baseline fails the sweep. A cancelled sweep keeps what it
   measured: configurations that finished all their rounds are logged ok, the others cancelled, and
   `SweepCancelled` carries them all (those with some rounds as `Entry.partial`);
6. report where it is while it runs: configuration k of n, warm-up or round r of R, denoising step s of S
   (`studio.sweeps.progress`).

Configurations that change their pipeline keep a live pipeline of their own for the sweep, a copy of the
loaded weights, so interleaving never rebuilds, recompiles or re-lays-out anything between rounds. That costs
one copy of the model's weights per such configuration while the sweep runs (see `own_pipelines`), except for
configurations whose techniques only read the weights (a runtime that converts them, as OpenVINO): those share
the loaded weights and cost only what their runtime holds.
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass, field
from typing import Any

import psutil
import torch

from studio.engine import Studio
from studio.engine import threads as cpu_threads
from studio.engine.run_data import Computed, Pending, RunOptions, RunResult, run_metrics
from studio.errors import Cancelled, StudioError, ValidationError
from studio.measure import protocol
from studio.measure.bench import Measurement, StopFn
from studio.measure.host import HostLoad, HostMonitor
from studio.request import MAX_CONFIGS, GenerationRequest, check_sweep, validate_counts
from studio.sweeps.progress import Position, Progress, Tracker

__all__ = ["Entry", "Progress", "SweepCancelled", "SweepResult", "merge", "own_pipelines", "run_sweep"]

# private pipelines may use at most this share of the memory available when the sweep starts
MEMORY_SHARE = 0.8
_sweep_ids = itertools.count(1)


@dataclass
class Entry:
    """One configuration of a sweep and what became of it."""

    label: str
    request: GenerationRequest
    reference: str | None = None  # the label of the entry its speedup is against (None: the sweep's first)
    pending: Pending | None = None
    calls: list[Computed] = field(default_factory=list)
    result: RunResult | None = None  # all its rounds measured, logged ok
    error: str | None = None
    partial: RunResult | None = None  # a cancelled sweep: the rounds it had (logged cancelled, not ok)


@dataclass
class SweepResult:
    group_id: int
    entries: list[Entry]
    host: HostLoad
    rounds: int

    @property
    def baseline(self) -> Entry:
        return self.entries[0]

    @property
    def finished(self) -> int:
        """The configurations that finished all their rounds."""
        return sum(e.result is not None for e in self.entries)


class SweepCancelled(Cancelled):
    """A sweep stopped by its stop check, with what it measured until then.

    `partial` holds every configuration: those that finished all their rounds with their logged result, the
    others with the rounds they had (`Entry.partial`) or nothing; `where` is the call it stopped in and
    `reason` what its stop check said. The face that ran the sweep puts its records in `records` (and an
    auto-tune its `stage`) before the error reaches the user.
    """

    def __init__(self, message: str, partial: SweepResult, where: Position | None, reason: str | None):
        super().__init__(message)
        self.partial, self.where, self.reason = partial, where, reason
        self.records: list[dict[str, Any]] = []
        self.stage: str | None = None

    def summary(self) -> str:
        """'Cancelled by the user during round 3 of 3, configuration 2 of 3 (sdpa), after 10 of 12 calls: 1
        of 3 configurations finished (3 rounds each).'"""
        why = self.reason or "stopped"
        head = f"Cancelled {why.removeprefix('cancelled ')}" if why.startswith("cancelled ") else ""
        head = head or f"Cancelled ({why})"
        count, rounds = len(self.partial.entries), self.partial.rounds
        each = f"{rounds} round{'s' if rounds != 1 else ''} each"
        finished = f"{self.partial.finished} of {count} configurations finished ({each})"
        if self.where is None:
            return f"{head} before the first call: {finished}."
        where = f"{self.where.phase_text}, configuration {self.where.index} of {count} ({self.where.label})"
        return f"{head} during {where}, after {self.where.call} of {self.where.calls} calls: {finished}."


def memory_for_copies(device: str) -> tuple[float, str]:
    """The bytes a sweep's own pipeline copies may take, and where: on a CUDA device the GPU's free memory and
    what torch's allocator holds cached (the copies are made there); elsewhere the host's available memory."""
    if device.startswith("cuda"):
        gpu = torch.device(device)
        free, _total = torch.cuda.mem_get_info(gpu)
        cached = torch.cuda.memory_reserved(gpu) - torch.cuda.memory_allocated(gpu)
        return MEMORY_SHARE * (free + cached), "GPU memory"
    return MEMORY_SHARE * psutil.virtual_memory().available, "memory"


def own_pipelines(studio: Studio, entries: list[Entry]) -> set[str]:
    """The configurations that get a live pipeline of their own for the sweep (a copy of the weights each).

    Every configuration that changes the pipeline does, when the copies fit in memory: then no round pays
    for re-applying a technique (a new weight layout also makes oneDNN and cuDNN pick their kernels again).
    Otherwise only the irreversible ones do, and the reversible ones are switched on the shared pipeline
    between calls, outside the timed region. A sweep whose irreversible copies do not fit is refused.
    """
    manager = studio.manager
    available, where = memory_for_copies(entries[0].request.device)
    changing = [e for e in entries[1:] if manager.changes_pipeline(e.request)]
    sizes = {e.label: manager.model_bytes(e.request) for e in changing}
    if sum(sizes.values()) <= available:
        return set(sizes)
    must = {e.label for e in changing if manager.changes_pipeline(e.request, irreversibly=True)}
    needed = sum(sizes[label] for label in must)
    if needed > available:
        raise ValidationError(
            f"This sweep keeps a copy of the model for each traced, compiled or int8 configuration "
            f"({needed / 2**30:.1f} GiB in all) and only {available / MEMORY_SHARE / 2**30:.1f} GiB of "
            f"{where} is available. Compare fewer of those configurations at once."
        )
    return must


def merge(calls: list[Computed], warmups: list[float], host: HostLoad | None, warmed: Any = ()) -> Computed:
    """The rounds of one configuration as one measurement (images of the last round only), with the phases
    its calls and its warm-up calls (`warmed`) paid: a warm-up's compile among them."""
    runs = [
        dataclasses.replace(c.measured.runs[-1], images=c.measured.runs[-1].images[:0]) for c in calls[:-1]
    ]
    runs.append(calls[-1].measured.runs[-1])
    first, last = calls[0], calls[-1]
    measured = Measurement(runs=runs, warmups=warmups, memory_kind=last.measured.memory_kind)
    paid = {"first_call_phases": [e for c in (*warmed, *calls) for e in c.stats.get("first_call_phases", ())]}
    kept = {"load_seconds": first.load_seconds, "first_call": first.first_call, "host": host}
    return dataclasses.replace(last, measured=measured, stats={**last.stats, **paid}, **kept)


def _call(
    studio: Studio,
    entry: Entry,
    slot: tuple[str, str] | None,
    tracker: Tracker,
    is_baseline: bool,
    threads: int | None,
) -> protocol.Call:
    stop = tracker.should_stop if tracker.stops else None

    def call() -> float:
        try:
            options = RunOptions(slot=slot, on_step=tracker.on_step, should_stop=stop, threads=threads)
            computed = studio.compute(entry.request, options)
        except Cancelled:
            raise
        except Exception as exc:
            # a library's own error (torch, torchao, OpenVINO) drops only this configuration
            if is_baseline:
                raise
            # logged now: a later cancel must not overwrite why this one stopped (an out-of-memory gains the
            # memory techniques to try as it is logged)
            studio.fail(entry.pending, exc)
            entry.error = str(exc) if isinstance(exc, StudioError) else f"{type(exc).__name__}: {exc}"
            raise protocol.Dropped(entry.error) from exc
        entry.calls.append(computed)
        return computed.measured.runs[-1].seconds

    return call


def run_sweep(
    studio: Studio,
    kind: str,
    entries: list[Entry],
    *,
    warmup: int,
    rounds: int,
    settings: dict[str, Any] | None = None,
    group_id: int | None = None,
    progress: Progress | None = None,
    should_stop: StopFn | None = None,
    max_configs: int | None = MAX_CONFIGS,
) -> SweepResult:
    """Measure `entries` (the first one is the baseline) interleaved, as one `kind` group of the run log.

    With `group_id` the runs join that group, which the caller opens and closes (an auto-tune's stages).
    """
    check_sweep([e.request for e in entries], validate_counts(warmup, rounds), max_configs)
    own = own_pipelines(studio, entries)
    request = entries[0].request
    own_group = group_id is None
    if own_group:
        group_id = studio.runlog.start_group(
            kind,
            model=request.model,
            prompt=request.prompt,
            seed=request.seed,
            settings={
                **(settings or {}),
                "configs": [e.label for e in entries],
                "warmup": warmup,
                "rounds": rounds,
            },
        )
    try:
        result = _measure(
            studio, group_id, entries, own, warmup, rounds=rounds, progress=progress, should_stop=should_stop
        )
    except BaseException as exc:
        for entry in entries:
            if entry.pending is not None and entry.result is None and entry.error is None:
                studio.fail(entry.pending, exc)
        if own_group:
            studio.runlog.finish_group(
                group_id, "cancelled" if isinstance(exc, Cancelled) else "failed", str(exc)
            )
        raise
    if own_group:
        studio.runlog.finish_group(group_id, "ok")
    return result


def _measure(
    studio: Studio,
    group_id: int,
    entries: list[Entry],
    own: set[str],
    warmup: int,
    rounds: int,
    progress: Progress | None,
    should_stop: StopFn | None,
) -> SweepResult:
    for entry in entries:
        entry.pending = studio.begin(entry.request, warmup=warmup, rounds=rounds, group_id=group_id)
    name = f"sweep-{next(_sweep_ids)}"
    threads = cpu_threads.choose(entries[0].request)  # one thread policy for every configuration: a fair race
    rounds = max(1, rounds)
    tracker = Tracker([e.label for e in entries], warmup, rounds, progress, should_stop)
    slots = {e.label: (name, e.label) if e.label in own else None for e in entries}
    calls = {
        e.label: _call(studio, e, slots[e.label], tracker, is_baseline=i == 0, threads=threads)
        for i, e in enumerate(entries)
    }
    stopped: Cancelled | None = None
    host = HostMonitor()
    try:
        with studio.manager.own_pipelines(name), host:
            protocol.interleaved(calls, rounds, warmup, tracker.before)
    except Cancelled as exc:
        stopped = exc
    _settle(studio, entries, warmup, rounds, host.result)
    result = SweepResult(group_id, entries, host.result, rounds)
    if stopped is not None:
        raise SweepCancelled(str(stopped), result, tracker.where, tracker.reason) from stopped
    return result


def _seconds(entry: Entry, warmup: int) -> tuple[list[float], list[float]]:
    """The seconds of an entry's warm-up calls and of its timed rounds so far."""
    seconds = [c.measured.runs[-1].seconds for c in entry.calls]
    return seconds[:warmup], seconds[warmup:]


def _settle(studio: Studio, entries: list[Entry], warmup: int, rounds: int, host: HostLoad) -> None:
    """Log as ok every configuration that ran all its rounds, its speedup against its reference; keep the
    rounds of the others (a cancelled sweep) as `Entry.partial`, for `run_sweep` to log them cancelled."""
    by_label = {e.label: e for e in entries}
    seconds = {e.label: _seconds(e, warmup) for e in entries}
    for entry in entries:  # an entry's reference comes before it (the X/Y sweep orders them so)
        if entry.error is not None:  # dropped: already logged as failed
            continue
        base = by_label[entry.reference or entries[0].label]
        warm, timed = seconds[entry.label]
        base_timed = None if base.error is not None else seconds[base.label][1]  # else no speedup
        if len(timed) < rounds:
            entry.partial = (
                _partial(entry, warm, timed, base_timed, host, is_base=entry is base) if timed else None
            )
            continue
        warmed, entry.calls = entry.calls[: len(warm)], entry.calls[len(warm) :]
        extra: dict[str, Any] = {"warmup_unsettled": protocol.unsettled(timed)}
        if base_timed is not None:
            extra.update(protocol.speedup(base_timed, timed, is_reference=entry is base).fields())
        merged = merge(entry.calls, warm, host, warmed)
        entry.result = studio.finish(entry.pending, merged, base.result, extra)


def _partial(
    entry: Entry,
    warm: list[float],
    timed: list[float],
    base_timed: list[float] | None,
    host: HostLoad,
    is_base: bool,
) -> RunResult:
    """The rounds a configuration had when its sweep was cancelled, as an unlogged result: its figures, and
    its speedup over the rounds its reference ran too (no verdict: the rounds asked for did not all run)."""
    merged = merge(entry.calls[len(warm) :], warm, host, warmed=entry.calls[: len(warm)])
    extra: dict[str, Any] = {}
    if base_timed:
        fields = protocol.speedup(base_timed, timed, is_reference=is_base).fields()
        extra = {k: v for k, v in fields.items() if k != "verdict" or is_base}
    metrics = run_metrics(entry.request, merged, extra)
    run_id = entry.pending.run_id if entry.pending is not None else None
    images = merged.measured.images
    return RunResult(
        run_id, entry.request, metrics, images=[], image_paths=[], arrays=images, applied=merged.applied
    )
