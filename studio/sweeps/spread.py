"""A sweep spread over the processes of a process group: plan, compute each share, gather, write.

Every process checks the whole sweep (`agreed_plan`), so bad input stops all of them with the same
sentence. `PartialState.split_between_processes` gives each process its share of the configurations; each
computes its share with the engine's compute-only path (no run-log or file writes), and `gather_object`
brings every result to the main process, the single writer (`spread`): it logs one group and all runs,
saves the images and measures quality against the baseline's arrays.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from accelerate import PartialState
from accelerate.utils import gather_object

from studio import devices, engine
from studio.engine import Studio
from studio.engine.run_data import Computed, RunOptions, RunResult, run_columns
from studio.errors import StudioError, ValidationError
from studio.manager import PipelineManager
from studio.measure import protocol
from studio.request import GenerationRequest, request_from_args
from studio.sweeps import compare
from studio.sweeps.process_group import any_refused
from studio.sweeps.runner import merge

log = logging.getLogger("studio.distributed")


@dataclass
class Outcome:
    """One configuration computed on one process: plain picklable values for the gather."""

    index: int
    where: dict[str, Any]
    hardware: dict[str, Any]
    computed: Computed | None = None
    error: str | None = None
    unexpected: bool = False


@dataclass
class WrittenSweep:
    """What the main process holds once every outcome is gathered and written."""

    studio: Studio
    group_id: int
    outcomes: list[Outcome]  # in job order
    results: list[RunResult | None]
    processes: list[dict[str, Any]]

    def finish(self, baseline_error: str | None = None) -> int:
        """Close the group: failed if the baseline failed (exit 2) or a process hit a bug (exit 1)."""
        unexpected = next((o.error for o in self.outcomes if o.unexpected), None)
        error = baseline_error or unexpected
        self.studio.runlog.finish_group(self.group_id, "failed" if error else "ok", error)
        if error:
            print(f"error: {error}", file=sys.stderr)
        return 1 if unexpected else 2 if baseline_error else 0


def _request(args: argparse.Namespace, device: str) -> GenerationRequest:
    if args.device not in ("auto", "cpu"):
        raise ValidationError(
            "In a distributed run each process uses its own device; use --device auto "
            "(one GPU per process, CPU without GPUs) or --device cpu."
        )
    return request_from_args(args, device=device)


def agreed_plan(
    args: argparse.Namespace,
    state: PartialState,
    device: str,
    plan: Callable[[GenerationRequest], Any],
):
    """(request, plan) checked on every process, or None when any process refused the input
    (collective call)."""
    try:
        request = _request(args, device)
        planned, error = (request, plan(request)), None
    except StudioError as exc:
        planned, error = None, str(exc)
    return None if any_refused(state, error) else planned


def compute_share(
    state: PartialState, jobs: list[GenerationRequest], where: dict[str, Any], warmup: int, rounds: int
) -> list[Outcome]:
    """Compute this process's share of `jobs` in interleaved rounds (the engine's protocol); a failure becomes
    an outcome with its message."""
    manager, hardware = PipelineManager(), devices.detect().summary()
    with state.split_between_processes(list(range(len(jobs)))) as mine:
        outcomes = {index: Outcome(index, where, hardware) for index in mine}
    calls: dict[int, list[Computed]] = {index: [] for index in outcomes}

    def call(index: int) -> protocol.Call:
        def run() -> float:
            request = jobs[index]
            try:
                slot = ("distributed", request.config_label) if manager.changes_pipeline(request) else None
                # engine.compute_run looked up at call time (tests replace it)
                computed = engine.compute_run(manager, request, RunOptions(slot=slot))
            except StudioError as exc:
                outcomes[index].error = str(exc)
                raise protocol.Dropped(str(exc)) from exc
            except Exception as exc:  # logged here with its traceback, recorded as a failed run by the writer
                log.exception("rank %d: %s failed", where["rank"], request.config_label)
                outcomes[index].error, outcomes[index].unexpected = f"{type(exc).__name__}: {exc}", True
                raise protocol.Dropped(str(exc)) from exc
            calls[index].append(computed)
            return computed.measured.runs[-1].seconds

        return run

    with manager.own_pipelines(
        "distributed"
    ):  # as in a single-process sweep: no re-application between rounds
        samples = protocol.interleaved({str(i): call(i) for i in outcomes}, max(1, rounds), warmup)
    for index, outcome in outcomes.items():
        if outcome.error is None:
            timed = calls[index][warmup:]
            outcome.computed = merge(timed, samples.warmups[str(index)], None)
            outcome.computed.stats["distributed"] = where
    return list(outcomes.values())


def write_runs(
    studio: Studio,
    group_id: int,
    jobs: list[GenerationRequest],
    outcomes: list[Outcome],
    warmup: int,
    rounds: int,
    *,
    baseline_first_only: bool,
) -> list[RunResult | None]:
    """Log every outcome (in job order) as a run of `group_id`: main process only.

    Args:
        baseline_first_only: compare: only job 0 is the baseline; ladder: the first run that succeeded.
    """
    results: list[RunResult | None] = []
    baseline: RunResult | None = None
    reference: list[float] | None = None
    for outcome in outcomes:
        request = dataclasses.replace(jobs[outcome.index], device=outcome.where["device"])
        if outcome.computed is None:
            run_id = studio.runlog.start_run(
                {**run_columns(request, warmup, rounds, group_id), "hardware": outcome.hardware}
            )
            studio.runlog.finish_run(run_id, "failed", error=outcome.error)
            results.append(None)
            continue
        latencies = outcome.computed.measured.latencies
        ratio = protocol.speedup(reference or latencies, latencies, is_reference=reference is None)
        extra = ratio.fields()
        run = studio.log_computed(
            request,
            outcome.computed,
            warmup=warmup,
            rounds=rounds,
            group_id=group_id,
            baseline=baseline,
            hardware=outcome.hardware,
            extra=extra,
        )
        if baseline is None and (outcome.index == 0 or not baseline_first_only):
            baseline, reference = run, latencies
        for warning in run.warnings:
            log.warning("%s: %s", request.config_label, warning)
        results.append(run)
    return results


def _processes(outcomes: list[Outcome], jobs: list[GenerationRequest]) -> list[dict[str, Any]]:
    by_rank: dict[int, dict[str, Any]] = {}
    for o in outcomes:
        entry = by_rank.setdefault(o.where["rank"], {**o.where, "configs": []})
        entry["configs"].append(jobs[o.index].config_label)
    return [by_rank[r] for r in sorted(by_rank)]


def spread(
    kind: str,
    state: PartialState,
    where: dict[str, Any],
    request: GenerationRequest,
    jobs: list[GenerationRequest],
    settings: dict[str, Any],
    *,
    warmup: int | None,
    rounds: int | None,
    db: str | None,
    baseline_first_only: bool,
) -> WrittenSweep | None:
    """Compute `jobs` spread over the processes, gather, and (main process only) write one group to the
    run log `db`; None elsewhere. `warmup` and `rounds` default to a compare's."""
    warmup, rounds = 1 if warmup is None else warmup, rounds or compare.DEFAULT_ROUNDS
    outcomes = sorted(gather_object(compute_share(state, jobs, where, warmup, rounds)), key=lambda o: o.index)
    if not state.is_main_process:
        return None
    studio = Studio(db_path=db)
    processes = _processes(outcomes, jobs)
    group_id = studio.runlog.start_group(
        kind,
        model=request.model,
        prompt=request.prompt,
        seed=request.seed,
        settings={**settings, "warmup": warmup, "rounds": rounds, "processes": processes},
    )
    try:
        results = write_runs(
            studio,
            group_id,
            jobs,
            outcomes,
            warmup=warmup,
            rounds=rounds,
            baseline_first_only=baseline_first_only,
        )
    except Exception as exc:
        studio.runlog.finish_group(group_id, "failed", str(exc))
        raise
    return WrittenSweep(studio, group_id, outcomes, results, processes)
