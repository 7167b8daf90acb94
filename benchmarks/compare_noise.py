"""Compare on the bundled model, quiet and beside a one-core busy loop: does the protocol keep its word?

Runs Compare (baseline vs channels_last vs torch_compile on tiny-shapes, 20 steps, 5 interleaved rounds)
`--runs` times on a quiet host and `--runs` times with a busy loop on one core started by this script, and
prints each result as the studio shows it, with how busy the host was. A result either stays within noise, or
says the host was busy; it should never claim x2 either way.

    .venv/bin/python -m benchmarks.compare_noise [--runs 2] [--rounds 5] \
        [--config channels_last --config torch_compile]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import tempfile
from pathlib import Path

from studio import devices, report
from studio.engine import Studio
from studio.request import build_request
from studio.sweeps.compare import run_compare

PROMPT = "a big red circle on the left, on a white background"


def _spin() -> None:
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {0})
    while True:
        pass


def compare(studio: Studio, configs: list[str], rounds: int, steps: int) -> str:
    request = build_request(model="tiny-shapes", prompt=PROMPT, seed=1, steps=steps)
    result = run_compare(studio, request, configs, warmup=1, rounds=rounds)
    host = result.sweep.host
    return (
        f"{report.markdown(result.records)}\n\nother processes: {host.busy_pct}% of the CPU, steal "
        f"{host.steal_pct}%, over {host.seconds:.0f} s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--config", action="append", default=[])
    args = parser.parse_args()
    configs = args.config or ["channels_last", "torch_compile"]
    hw = devices.detect()
    print(
        f"CPU: {hw.cpu_name}, {hw.cpu_count} cores; tiny-shapes 64x64, {args.steps} steps, {args.rounds} "
        "rounds\n"
    )
    with tempfile.TemporaryDirectory() as home:
        studio = Studio(db_path=Path(home) / "runs.db", outputs=Path(home) / "out")
        for busy in (False, True):
            for run in range(1, args.runs + 1):
                spinner = multiprocessing.Process(target=_spin, daemon=True) if busy else None
                if spinner:
                    spinner.start()
                try:
                    text = compare(studio, configs, args.rounds, args.steps)
                finally:
                    if spinner:
                        spinner.kill()
                print(
                    f"### {'with a one-core busy loop' if busy else 'quiet'}, run {run}\n\n{text}\n",
                    flush=True,
                )


if __name__ == "__main__":
    main()
