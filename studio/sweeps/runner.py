"""The one sweep helper: a group in the run log, every configuration timed in interleaved rounds, each logged.

Compare, Ladder, Auto-tune and the distributed sweeps all go through `run_sweep`:

1. refuse, before anything runs, a sweep whose private pipelines would not fit in memory;
2. open a group and log every configuration as a `running` run;
3. warm every configuration up, then time it once per round, A B C, A B C, ... (`studio.measure.protocol`);
4. log each configuration with its latencies, its per-round speedup against the baseline (median, min-max,
   verdict), how busy the host was, and its image's difference from the baseline's;
5. close the group as ok, failed or cancelled, on every path. A configuration that fails becomes a failed
   run and leaves the later rounds; a failing baseline fails the sweep.

Configurations that change their pipeline keep a live pipeline of their own for the sweep, a copy of the
loaded weights, so interleaving never rebuilds, recompiles or re-lays-out anything between rounds. That costs
one copy of the model's weights per such configuration while the sweep runs (see `own_pipelines`), except for
configurations whose techniques only read the weights (a runtime that converts them, as OpenVINO): those share
the loaded weights and cost only what their runtime holds.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psutil
import torch

from studio.engine import Studio
from studio.engine import threads as cpu_threads
from studio.engine.run_data import Computed, Pending, RunResult
from studio.errors import Cancelled, StudioError, ValidationError
from studio.measure import protocol
from studio.measure.bench import Measurement, StopFn
from studio.measure.host import HostLoad, HostMonitor
from studio.request import MAX_CONFIGS, GenerationRequest, check_sweep, validate_counts

Progress = Callable[[int, int, str], None]
MEMORY_SHARE = (
    0.8  # private pipelines may use at most this share of the memory available when the sweep starts
)
_sweep_ids = itertools.count(1)


@dataclass
class Entry:
    """One configuration of a sweep and what became of it."""

    label: str
    request: GenerationRequest
    reference: str | None = None  # the label of the entry its speedup is against (None: the sweep's first)
    pending: Pending | None = None
    calls: list[Computed] = field(default_factory=list)
    result: RunResult | None = None
    error: str | None = None


@dataclass
class SweepResult:
    group_id: int
    entries: list[Entry]
    host: HostLoad
    rounds: int

    @property
    def baseline(self) -> Entry:
        return self.entries[0]


def memory_for_copies(device: str) -> tuple[float, str]:
    """The bytes a sweep's own pipeline copies may take, and where they live: on a CUDA device the copies are
    made on the GPU, so its free memory bounds them; elsewhere the host's available memory."""
    if device.startswith("cuda"):
        free, _total = torch.cuda.mem_get_info(torch.device(device))
        return MEMORY_SHARE * free, "GPU memory"
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


def merge(calls: list[Computed], warmups: list[float], host: HostLoad | None) -> Computed:
    """The rounds of one configuration as one measurement (images of the last round only)."""
    runs = [
        dataclasses.replace(c.measured.runs[-1], images=c.measured.runs[-1].images[:0]) for c in calls[:-1]
    ]
    runs.append(calls[-1].measured.runs[-1])
    first, last = calls[0], calls[-1]
    measured = Measurement(runs=runs, warmups=warmups, memory_kind=last.measured.memory_kind)
    return Computed(
        measured, last.applied, first.load_seconds, last.switch_seconds, first.first_call, last.stats, host
    )


def _call(
    studio: Studio,
    entry: Entry,
    slot: tuple[str, str] | None,
    should_stop: StopFn | None,
    is_baseline: bool,
    threads: int | None,
) -> protocol.Call:
    def call() -> float:
        try:
            computed = studio.compute(entry.request, slot=slot, should_stop=should_stop, threads=threads)
        except Cancelled:
            raise
        except Exception as exc:
            # a library's own error (torch, torchao, OpenVINO) drops only this configuration
            if is_baseline:
                raise
            entry.error = str(exc) if isinstance(exc, StudioError) else f"{type(exc).__name__}: {exc}"
            # logged now: a later cancel must not overwrite why this one stopped
            studio.fail(entry.pending, exc)
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
        result = _measure(studio, group_id, entries, own, warmup, rounds, progress, should_stop)
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
        entry.pending = studio.begin(entry.request, warmup=warmup, repeats=rounds, group_id=group_id)
    name = f"sweep-{next(_sweep_ids)}"
    threads = cpu_threads.choose(entries[0].request)  # one thread policy for every configuration: a fair race
    calls = {
        e.label: _call(studio, e, (name, e.label) if e.label in own else None, should_stop, i == 0, threads)
        for i, e in enumerate(entries)
    }
    total, done = len(entries) * (warmup + rounds), itertools.count()

    def before(phase: str, label: str) -> None:
        if progress:
            progress(next(done), total, f"{'warming up' if phase == 'warmup' else 'timing'} {label}")

    with studio.manager.own_pipelines(name), HostMonitor() as host:
        samples = protocol.interleaved(calls, max(1, rounds), warmup, before)
    by_label = {e.label: e for e in entries}
    for entry in entries:  # an entry's reference comes before it (the X/Y sweep orders them so)
        if entry.label in samples.dropped:
            continue
        base = by_label[entry.reference or entries[0].label]
        timed = samples.timed[entry.label]
        entry.calls = entry.calls[len(entry.calls) - len(timed) :]
        extra: dict[str, Any] = {"warmup_unsettled": protocol.unsettled(timed)}
        if base.label not in samples.dropped:  # else (an X/Y point whose baseline failed) no speedup
            extra.update(
                protocol.speedup(samples.timed[base.label], timed, is_reference=entry is base).fields()
            )
        merged = merge(entry.calls, samples.warmups[entry.label], host.result)
        entry.result = studio.finish(entry.pending, merged, base.result, extra)
    return SweepResult(group_id, entries, host.result, rounds)
