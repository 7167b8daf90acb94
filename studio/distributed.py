"""`python -m studio.distributed compare|ladder ...`: one sweep spread over processes, GPUs or nodes.

Started by a launcher, one process per device: `torchrun --nproc_per_node N -m studio.distributed ...`
or `accelerate launch --multi_gpu --num_processes N -m studio.distributed ...`. Every process
validates the whole sweep, and the processes agree before any work starts, so bad input stops
all of them with the same sentence. `PartialState.split_between_processes` gives each process
its share of the configurations; each computes its share with the engine's compute-only path
(no run-log or file writes), and `gather_object` brings every result to the main process, the
single writer: it logs one group and all runs, saves the images and measures quality against
the baseline's arrays. Each run records the process that measured it (rank, host, device,
torch threads) in its `stats` and that process's hardware in `hardware`.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import random
import socket
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from accelerate import PartialState
from accelerate.utils import broadcast_object_list, gather_object

from studio import devices, engine, report
from studio.arguments import request_args, rounds_arg
from studio.engine import Computed, RunResult, Studio, run_record
from studio.errors import StudioError, ValidationError
from studio.manager import PipelineManager
from studio.measure import protocol
from studio.report import emit
from studio.request import MAX_SEED, GenerationRequest, request_from_args
from studio.sweeps import compare, ladder
from studio.sweeps.runner import merge

log = logging.getLogger("studio.distributed")
COMPARABLE = (
    "Timings measured by different processes compare only when their devices are alike "
    "(same GPU model, or the same CPU cores and thread counts); processes sharing one machine slow each "
    "other."
)


@dataclass
class Outcome:
    """One configuration computed on one process: plain picklable values for the gather."""

    index: int
    where: dict[str, Any]
    hardware: dict[str, Any]
    computed: Computed | None = None
    error: str | None = None
    unexpected: bool = False


def start(args: argparse.Namespace) -> PartialState:
    """Join the process group: gloo on CPU hosts (or with --device cpu), the accelerator's backend
    otherwise."""
    use_cpu = (
        args.device == "cpu"
        or not torch.cuda.is_available()
        or os.environ.get("ACCELERATE_USE_CPU", "").lower() in ("1", "true")
    )
    state = PartialState(cpu=use_cpu)
    if state.num_processes == 1 and os.environ.get("ACCELERATE_USE_CPU", "").lower() == "true":
        log.warning(
            "one process only: `accelerate launch --cpu` starts a single process unless given an MPI "
            "hostfile; "
            "use `accelerate launch --multi_gpu --num_processes N` or `torchrun --nproc_per_node N`"
        )
    return state


def placement(state: PartialState, threads: int | None) -> dict[str, Any]:
    """Set this process's torch threads to its share of the machine's cores; return where it runs."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    local = int(os.environ.get("LOCAL_WORLD_SIZE") or state.num_processes)
    threads = threads or max(1, cores // local)
    torch.set_num_threads(threads)
    device = f"cuda:{state.device.index or 0}" if state.device.type == "cuda" else "cpu"
    return {
        "rank": state.process_index,
        "local_rank": state.local_process_index,
        "world_size": state.num_processes,
        "host": socket.gethostname(),
        "device": device,
        "torch_threads": threads,
        "backend": state.backend,
    }


def _refused(state: PartialState, error: str | None) -> bool:
    """Whether any process refused the input; if so every process prints every reason (collective call)."""
    errors = list(dict.fromkeys(e for e in gather_object([error]) if e))
    if errors:
        sys.stderr.write(f"error: {' '.join(errors)}\n")  # one write: the processes' lines do not interleave
        sys.stderr.flush()
        # nobody exits (and gets its peers killed by the launcher) before all have printed
        state.wait_for_everyone()
    return bool(errors)


def _shared_seed(seed: int) -> int:
    """Seed -1 means random: the main process draws it for everybody."""
    if seed != -1:
        return seed
    return broadcast_object_list([random.randint(0, MAX_SEED)])[0]


def _request(args: argparse.Namespace, device: str) -> GenerationRequest:
    if args.device not in ("auto", "cpu"):
        raise ValidationError(
            "In a distributed run each process uses its own device; use --device auto "
            "(one GPU per process, CPU without GPUs) or --device cpu."
        )
    return request_from_args(args, device=device)


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
                computed = engine.compute_run(manager, request, slot=slot)
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
    repeats: int,
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
                {**run_record(request, warmup, repeats, group_id), "hardware": outcome.hardware}
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
            repeats=repeats,
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


def _note(processes: list[dict[str, Any]]) -> str:
    parts = [
        f"rank {p['rank']} ({p['host']}, {p['device']}, {p['torch_threads']} torch threads): "
        f"{', '.join(p['configs'])}"
        for p in processes
    ]
    return (
        f"Spread over {len(processes)} process(es): "
        + "; ".join(parts)
        + "."
        + (f" {COMPARABLE}" if len(processes) > 1 else "")
    )


@dataclass
class Sweep:
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


def _planned(
    args: argparse.Namespace,
    state: PartialState,
    where: dict[str, Any],
    plan: Callable[[GenerationRequest], Any],
):
    """(request, plan) checked on every process, or None when any process refused the input
    (collective call)."""
    try:
        request = _request(args, where["device"])
        planned, error = (request, plan(request)), None
    except StudioError as exc:
        planned, error = None, str(exc)
    return None if _refused(state, error) else planned


def spread(
    kind: str,
    args: argparse.Namespace,
    state: PartialState,
    where: dict[str, Any],
    request: GenerationRequest,
    jobs: list[GenerationRequest],
    settings: dict[str, Any],
    *,
    baseline_first_only: bool,
) -> Sweep | None:
    """Compute `jobs` spread over the processes, gather, and (main process only) write one group; None
    elsewhere."""
    warmup, repeats = 1 if args.warmup is None else args.warmup, args.rounds or compare.DEFAULT_ROUNDS
    outcomes = sorted(
        gather_object(compute_share(state, jobs, where, warmup, repeats)), key=lambda o: o.index
    )
    if not state.is_main_process:
        return None
    studio = Studio(db_path=args.db)
    processes = _processes(outcomes, jobs)
    group_id = studio.runlog.start_group(
        kind,
        model=request.model,
        prompt=request.prompt,
        seed=request.seed,
        settings={**settings, "warmup": warmup, "repeats": repeats, "processes": processes},
    )
    try:
        results = write_runs(
            studio, group_id, jobs, outcomes, warmup, repeats, baseline_first_only=baseline_first_only
        )
    except Exception as exc:
        studio.runlog.finish_group(group_id, "failed", str(exc))
        raise
    return Sweep(studio, group_id, outcomes, results, processes)


def cmd_compare(args: argparse.Namespace, state: PartialState, where: dict[str, Any]) -> int:
    """Baseline and configurations spread over the processes; one group written by the main process."""
    planned = _planned(
        args,
        state,
        where,
        lambda r: [dataclasses.replace(r, opts=o) for o in compare.parse_configs(args.config, r)],
    )
    if planned is None:
        return 2
    request, jobs = planned
    sweep = spread(
        "compare",
        args,
        state,
        where,
        request,
        jobs,
        {"configs": [j.config_label for j in jobs]},
        baseline_first_only=True,
    )
    if sweep is None:
        return 0
    baseline, rows = sweep.results[0], []
    for job, run, o in zip(jobs, sweep.results, sweep.outcomes, strict=True):
        place = {k: o.where[k] for k in ("rank", "host", "device", "torch_threads")}
        if run is None or baseline is None:
            rows.append(
                {
                    **report.failed_record(job.config_label, o.error or "not compared: the baseline failed"),
                    **place,
                }
            )
        else:
            rows.append({**report.run_record(run, baseline), **place})
    note = _note(sweep.processes)
    emit(
        {"group_id": sweep.group_id, "rows": rows, "processes": sweep.processes, "note": note},
        args.json,
        f"{report.markdown(rows)}\n\n{note}",
    )
    return sweep.finish(sweep.outcomes[0].error if baseline is None else None)


def cmd_ladder(args: argparse.Namespace, state: PartialState, where: dict[str, Any]) -> int:
    """The cumulative ladder (its one plan, `ladder.plan`), its rungs spread over the processes."""
    planned = _planned(args, state, where, ladder.plan)
    if planned is None:
        return 2
    request, steps = planned
    jobs = [dataclasses.replace(request, opts=s.opts) for s in steps if not s.skipped]
    sweep = spread("ladder", args, state, where, request, jobs, {}, baseline_first_only=False)
    if sweep is None:
        return 0
    base = next((run for run in sweep.results if run is not None), None)
    records = [
        report.run_record(run, base) if run else report.failed_record(job.config_label, o.error or "")
        for job, run, o in zip(jobs, sweep.results, sweep.outcomes, strict=True)
    ]
    rows = ladder.ladder_records(steps, records)
    note = _note(sweep.processes)
    emit(
        {"group_id": sweep.group_id, "rows": rows, "processes": sweep.processes, "note": note},
        args.json,
        f"{ladder.markdown(rows)}\n\n{note}",
    )
    return sweep.finish()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m studio.distributed",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("-v", "--verbose", action="store_true")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, helptext in (("compare", "baseline vs configurations"), ("ladder", "the cumulative ladder")):
        p = sub.add_parser(name, help=helptext)
        request_args(p)
        rounds_arg(p, compare.DEFAULT_ROUNDS)
        p.add_argument("--db", help="the run log (default: $STUDIO_DB or $STUDIO_HOME/runs.db)")
        p.add_argument(
            "--threads",
            type=_positive,
            help="torch threads per process (default: cores / processes on this machine)",
        )
        if name == "compare":
            p.add_argument(
                "--config", action="append", default=[], help="'baseline' or 'bf16,channels_last' (repeat)"
            )
    return parser


def _positive(value: str) -> int:
    if not value.isdigit() or int(value) < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number of threads, 1 or more, not {value!r}")
    return int(value)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format=f"%(levelname)s rank {os.environ.get('RANK', '0')} %(name)s: %(message)s",
    )
    state = start(args)
    where = placement(state, args.threads)
    try:
        args.seed = _shared_seed(args.seed)
        return {"compare": cmd_compare, "ladder": cmd_ladder}[args.command](args, state, where)
    except StudioError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        state.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
