"""Memory over a long life: every technique applied and reverted many times in one studio process.

1. Alternating: each technique that runs on this machine for the bundled model (tiny-shapes, 64x64, 4
   steps) alternates with the baseline run by run (technique, baseline, technique, ...) through
   `Studio.generate`, as Generate does; the process's RSS after a warm-up and after the last run, as MB per
   100 runs. Each technique's first call on its first apply is set beside its first call on its second apply
   (which reuses what the first built, `studio.optimizations.kept`).
2. Compare: each technique that builds something (a trace, a compile, a conversion, a package) in a Compare
   against the baseline, again and again: a Compare works on its own copy of the pipeline and drops it at the
   end, so what its copy built must go with it. MB per Compare after a warm-up.
3. Mixed: at least 1,000 runs cycling configurations, three sizes and two models (tiny-shapes, a UNet, and
   flux-tiny, a transformer): RSS after the warm-up and at the end, the graphs built, and runs lost (asked
   against logged `ok` in the run log).

Targets: each technique grows the process by at most 10 MB per 100 alternating runs after the warm-up; the
mixed run ends within 10% of its RSS after the warm-up with no run lost.

RSS is read after a garbage collection, from /proc (psutil), with no allocator trimming: what a server's
process would hold. The first line names the CPU.

Run: .venv/bin/python -m benchmarks.soak                          (about 40 minutes on 2 cores)
     .venv/bin/python -m benchmarks.soak --runs 40 --mixed 0      (the alternating part alone)
     .venv/bin/python -m benchmarks.soak --only jit_trace_unet,openvino --compares 0 --mixed 0
"""

from __future__ import annotations

import argparse
import gc
import itertools
import logging
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("STUDIO_HOME", tempfile.mkdtemp(prefix="studio-soak-"))

import psutil

from studio import devices
from studio.engine import Studio
from studio.optimizations import availability, get
from studio.request import build_request
from studio.sweeps.compare import run_compare

log = logging.getLogger("benchmarks.soak")
MB = 2**20
PROMPT = "a big red circle on the left, on a black background"
TARGET_MB_PER_100 = 10.0
TARGET_MIXED_GROWTH = 0.10
MIXED_CONFIGS = {
    "tiny-shapes": (
        [],
        ["channels_last"],
        ["jit_trace_unet"],
        ["torch_compile"],
        ["deepcache"],
        ["sdpa", "fused_qkv"],
        ["openvino"],
        ["aot_package"],
        ["cfg_cutoff", "token_merging"],
        ["int8_dynamic"],
    ),
    "flux-tiny": ([], ["torch_compile"], ["first_block_cache"], ["fused_qkv"]),
}
SIZES = {"tiny-shapes": (64, 96, 128), "flux-tiny": (64, 128)}


def rss_mb() -> float:
    gc.collect()
    return psutil.Process().memory_info().rss / MB


@dataclass
class Alternating:
    technique: str
    runs: int
    warm_mb: float
    end_mb: float
    first_apply_s: float
    second_apply_s: float

    @property
    def per_100(self) -> float:
        measured = self.runs - WARMUP_RUNS
        return (self.end_mb - self.warm_mb) / measured * 100 if measured > 0 else float("nan")


WARMUP_RUNS = 10


def request(model: str = "tiny-shapes", optimizations: list[str] = (), size: int = 64, steps: int = 4):
    return build_request(
        model=model,
        prompt=PROMPT,
        seed=1,
        steps=steps,
        width=size,
        height=size,
        optimizations=list(optimizations),
    )


def techniques_here(family: str, only: set[str] | None) -> list[str]:
    """Techniques that run on this machine for a model of `family` (the load-stage ones too: bf16 loads a copy
    of the weights once)."""
    names = [a["name"] for a in availability("cpu", family) if not a["unavailable"]]
    return [n for n in names if only is None or n in only]


def alternating(studio: Studio, technique: str, runs: int) -> Alternating:
    """`technique` and the baseline in turn, `runs` runs in all."""
    latencies = []
    warm = 0.0
    for i in range(runs):
        result = studio.generate(request(optimizations=[technique] if i % 2 == 0 else []))
        if i % 2 == 0:
            latencies.append(result.metrics["latency_s"])
        if i + 1 == WARMUP_RUNS:
            warm = rss_mb()
    return Alternating(technique, runs, warm, rss_mb(), latencies[0], latencies[1])


def compares(studio: Studio, technique: str, count: int) -> tuple[float, float]:
    """`count` Compares of `technique` against the baseline: (MB per Compare after the first two, seconds per
    Compare)."""
    sizes, seconds = [], []
    for _ in range(count):
        start = time.perf_counter()
        run_compare(studio, request(), [technique], warmup=0, rounds=1)
        seconds.append(time.perf_counter() - start)
        sizes.append(rss_mb())
    grown = (sizes[-1] - sizes[1]) / (count - 2) if count > 2 else float("nan")
    return grown, statistics.median(seconds)


def mixed(studio: Studio, runs: int, report: Callable[[str], None]) -> None:
    """`runs` runs cycling every configuration of `MIXED_CONFIGS` at each size of both models."""
    plan = [
        (model, list(config), size)
        for model, configs in MIXED_CONFIGS.items()
        for config in configs
        for size in SIZES[model]
    ]
    cycle = itertools.cycle(plan)
    run_ids, failed, warm, start = [], 0, None, time.perf_counter()
    for i in range(runs):
        model, config, size = next(cycle)
        try:
            result = studio.generate(request(model, config, size, steps=2 if model == "flux-tiny" else 4))
            run_ids.append(result.run_id)
        except Exception as exc:  # a failed run is counted and said, the soak goes on
            failed += 1
            report(f"  run {i + 1} ({model} {config} {size}px) failed: {type(exc).__name__}: {exc}")
        if i + 1 == len(plan) * 2:
            warm = rss_mb()
            report(f"  after the warm-up ({i + 1} runs, every configuration and size twice): {warm:.0f} MB")
        if (i + 1) % 200 == 0:
            report(f"  {i + 1} runs: {rss_mb():.0f} MB, {time.perf_counter() - start:.0f} s")
    end = rss_mb()
    ok = sum(
        1 for run_id in run_ids if run_id is not None and studio.runlog.get_run(run_id)["status"] == "ok"
    )
    report(f"  {runs} runs asked, {failed} failed, {ok} logged ok")
    if warm:
        growth = (end - warm) / warm
        verdict = "meets" if growth <= TARGET_MIXED_GROWTH and ok == runs else "misses"
        report(
            f"  RSS after warm-up {warm:.0f} MB, at the end {end:.0f} MB: {growth:+.1%} "
            f"({verdict} the target of at most {TARGET_MIXED_GROWTH:.0%} and no run lost)"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--runs", type=int, default=60, help="alternating runs per technique (default 60; 0: none)"
    )
    parser.add_argument("--compares", type=int, default=8, help="Compares per building technique (default 8)")
    parser.add_argument(
        "--mixed", type=int, default=1000, help="runs of the mixed part (default 1000; 0: none)"
    )
    parser.add_argument("--only", default="", help="comma-separated techniques (default: all that run here)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    only = set(filter(None, args.only.split(","))) or None
    print(f"CPU: {devices.detect().summary()['cpu_name']}, {os.cpu_count()} cores", flush=True)

    studio = Studio()
    studio.generate(request())  # the model loaded, the baseline warm
    if args.runs:
        print(
            f"\n## Alternating with the baseline ({args.runs} runs each; RSS after {WARMUP_RUNS}, at the end)"
        )
        print("| technique | MB per 100 runs | first apply's first call | second apply's first call |")
        print("|---|---|---|---|")
    for name in techniques_here("sd", only) if args.runs else ():
        row = alternating(studio, name, args.runs)
        mark = "" if row.per_100 <= TARGET_MB_PER_100 else " (over the target)"
        calls = f"{row.first_apply_s:.2f} s | {row.second_apply_s:.2f} s"
        print(f"| `{name}` | {row.per_100:+.1f}{mark} | {calls} |", flush=True)

    if args.compares:
        builders = [
            n for n in techniques_here("sd", only) if not get(n).reversible and get(n).stage == "pipeline"
        ]
        print(f"\n## Compare against the baseline, {args.compares} times each")
        print("| technique | MB per Compare after two | seconds per Compare |")
        print("|---|---|---|")
        for name in builders:
            grown, seconds = compares(studio, name, args.compares)
            print(f"| `{name}` | {grown:+.1f} | {seconds:.1f} s |", flush=True)

    if args.mixed:
        print(f"\n## Mixed: {args.mixed} runs over {sum(map(len, MIXED_CONFIGS.values()))} configurations")
        mixed(studio, args.mixed, lambda line: print(line, flush=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
