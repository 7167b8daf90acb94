"""Generate on a shared host: quiet, and beside a one-core busy loop in another process, with torch's threads
fixed at one per physical core (what plain diffusers does) and as the studio picks them (the cores free at
request time). The studio's own Generate each time (`Studio.generate`), interleaved, median of `--calls`
calls with their range; the busy loop spins on one core for the whole busy block.

    .venv/bin/python -m benchmarks.shared_host [--calls 5] [--steps 20] [--config baseline --config openvino]

Target: busy within x1.5 of quiet with the studio's threads, and a quiet call losing at most 5%.
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import tempfile
from pathlib import Path

from benchmarks.compare_noise import _spin
from studio import devices
from studio.engine import Studio
from studio.optimizations.runtime import physical_cores
from studio.request import build_request

PROMPT = "a big red circle on the left, on a white background"


def _request(config: str, fixed: bool, steps: int):
    optimizations = [] if config == "baseline" else config.split("+")
    settings = {}
    if fixed:
        optimizations.append("threads")
        settings["threads"] = {"num_threads": physical_cores()}
    return build_request(
        model="tiny-shapes",
        prompt=PROMPT,
        seed=1,
        steps=steps,
        optimizations=optimizations,
        settings=settings,
        device="cpu",
    )


def measure(studio: Studio, configs: list[str], calls: int, steps: int) -> dict[tuple[str, str], list]:
    """{(config, threads policy): [(seconds, threads used), ...]}, the policies interleaved call by call."""
    found: dict[tuple[str, str], list] = {}
    for config in configs:
        requests = {"fixed": _request(config, True, steps), "studio": _request(config, False, steps)}
        for req in requests.values():
            studio.generate(req)  # warm-up: builds and first calls apart
        for _ in range(calls):
            for policy, req in requests.items():
                run = studio.generate(req)
                found.setdefault((config, policy), []).append(
                    (run.metrics["latency_s"], run.metrics["stats"].get("cpu_threads"))
                )
    return found


def _cell(samples: list) -> str:
    seconds = [s for s, _ in samples]
    used = sorted({t for _, t in samples if t is not None})
    return (
        f"{statistics.median(seconds):.3f} s ({min(seconds):.3f}-{max(seconds):.3f}), "
        f"threads {','.join(map(str, used))}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--config", action="append", default=[])
    args = parser.parse_args()
    configs = args.config or ["baseline", "openvino"]
    hw = devices.detect()
    print(f"CPU: {hw.cpu_name}, {hw.cpu_count} logical cores; tiny-shapes 64x64, {args.steps} steps\n")
    with tempfile.TemporaryDirectory() as home:
        studio = Studio(db_path=Path(home) / "runs.db", outputs=Path(home) / "out")
        quiet = measure(studio, configs, args.calls, args.steps)
        spinner = multiprocessing.Process(target=_spin, daemon=True)
        spinner.start()
        try:
            busy = measure(studio, configs, args.calls, args.steps)
        finally:
            spinner.terminate()
    print("| configuration | threads | quiet | one core busy | busy / quiet |")
    print("|---|---|---|---|---|")
    for key in quiet:
        ratio = statistics.median(s for s, _ in busy[key]) / statistics.median(s for s, _ in quiet[key])
        print(f"| {key[0]} | {key[1]} | {_cell(quiet[key])} | {_cell(busy[key])} | x{ratio:.2f} |")
    for config in configs:
        q = [statistics.median(s for s, _ in quiet[(config, p)]) for p in ("fixed", "studio")]
        print(
            f"{config}: a quiet call with the studio's threads takes x{q[1] / q[0]:.3f} of the fixed count's"
        )


if __name__ == "__main__":
    main()
