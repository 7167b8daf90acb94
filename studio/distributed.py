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
import sys
from typing import Any

from accelerate import PartialState

from studio import report
from studio.cli.arguments import request_args, rounds_arg
from studio.errors import StudioError
from studio.report import emit
from studio.sweeps import compare, ladder
from studio.sweeps.process_group import join_process_group, placement, shared_seed
from studio.sweeps.spread import agreed_plan, spread

COMPARABLE = (
    "Timings measured by different processes compare only when their devices are alike "
    "(same GPU model, or the same CPU cores and thread counts); processes sharing one machine slow each "
    "other."
)


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


def _timing(args: argparse.Namespace) -> dict[str, Any]:
    """What `spread` takes from the command line: --warmup, --rounds and --db."""
    return {"warmup": args.warmup, "rounds": args.rounds, "db": args.db}


def cmd_compare(args: argparse.Namespace, state: PartialState, where: dict[str, Any]) -> int:
    """Baseline and configurations spread over the processes; one group written by the main process."""
    planned = agreed_plan(
        args,
        state,
        where["device"],
        lambda r: compare.parse_configs(args.config, r),
    )
    if planned is None:
        return 2
    request, jobs = planned
    sweep = spread(
        "compare",
        state,
        where,
        request,
        jobs=jobs,
        settings={"configs": [j.config_label for j in jobs]},
        **_timing(args),
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
    planned = agreed_plan(args, state, where["device"], ladder.plan)
    if planned is None:
        return 2
    request, steps = planned
    jobs = [dataclasses.replace(request, optimizations=s.optimizations) for s in steps if not s.skipped]
    sweep = spread(
        "ladder",
        state,
        where,
        request,
        jobs=jobs,
        settings={},
        **_timing(args),
        baseline_first_only=False,
    )
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
    state = join_process_group(args.device)
    where = placement(state, args.threads)
    try:
        args.seed = shared_seed(args.seed)
        return {"compare": cmd_compare, "ladder": cmd_ladder}[args.command](args, state, where)
    except StudioError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        state.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
