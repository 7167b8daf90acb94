"""glibc's allocator settings and fp32 speed on this CPU: sd15-arch's VAE decode and UNet call at 256x256.

glibc serves large allocations (above a threshold that grows to at most 32 MB) with a fresh mmap and gives
them back to the kernel when they are freed, so the next call page-faults them in again, 4 KiB at a time. In
fp32 on a CPU that is ~450k minor faults per SD 1.5 UNet call (oneDNN reorders the convolution weights into
fresh buffers on every call) and ~500k per VAE decode at 256x256 (activations of 32-64 MB). This script
measures what that costs by running the same work in child processes started with and without

    GLIBC_TUNABLES=glibc.malloc.arena_max=1:glibc.malloc.mmap_max=0:\
    glibc.malloc.trim_threshold=18446744073709551615

(one arena for all threads, never mmap, never give memory back: freed memory is reused by the next call), in
alternating rounds (default, tuned, default, tuned, ...). Each child times 3 calls after a warm-up, in the
main thread and in a worker thread (the studio's server runs pipelines in worker threads; without arena_max=1
their arenas are 64 MB heaps and the largest tensors are still mmapped). Speedups are medians of the per-round
ratios, with their range.

The setting is process-wide and read when the process starts, so it is not a registry technique (techniques
are applied per request and reverted). To start the studio with it:

    GLIBC_TUNABLES=glibc.malloc.arena_max=1:glibc.malloc.mmap_max=0:\
    glibc.malloc.trim_threshold=18446744073709551615 make run

The cost: the process keeps its peak memory for its whole life. int8_static has little to gain: its weights
are packed once, its UNet call page-faults ~17 times and its int8 decoder ~82k times at 256x256 (measured; the
decoder's time did not move beyond noise with the setting).

Run: .venv/bin/python -m benchmarks.allocator [--rounds 3]     (about 4 min per round on 2 cores)
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import threading
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

KEEP_MEMORY = (
    "glibc.malloc.arena_max=1:glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=18446744073709551615"
)
CALLS = 3


def _timed(fn, calls: int) -> dict[str, float]:
    """Median seconds and minor page faults per call of `fn`, after one warm-up call."""
    fn()
    times, faults = [], []
    for _ in range(calls):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    return {"seconds": statistics.median(times), "faults": statistics.median(faults)}


def child() -> None:
    """Time sd15-arch's fp32 VAE decode (256x256) and UNet call (batch 2, as with guidance) and print JSON."""
    import torch

    from pipelines import loader
    from pipelines.registry import resolve

    torch.manual_seed(0)
    pipe = loader.load(resolve("sd15-arch"))
    latents = torch.randn(1, 4, 32, 32)
    unet_in = (torch.randn(2, 4, 32, 32), torch.tensor(500), torch.randn(2, 77, 768))

    def decode() -> None:
        pipe.vae.decode(latents)

    def unet() -> None:
        pipe.unet(unet_in[0], unet_in[1], encoder_hidden_states=unet_in[2])

    out: dict[str, dict[str, float]] = {}

    def measure(where: str) -> None:
        with torch.no_grad():
            out[f"decode ({where})"] = _timed(decode, CALLS)
            out[f"unet ({where})"] = _timed(unet, CALLS)

    measure("main thread")
    worker = threading.Thread(target=measure, args=("worker thread",))
    worker.start()
    worker.join()
    print(json.dumps(out))


def _run_child(tuned: bool) -> dict[str, dict[str, float]]:
    env = {k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES"}
    if tuned:
        env["GLIBC_TUNABLES"] = KEEP_MEMORY
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.allocator", "--child"],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(rounds: int) -> None:
    results: dict[bool, list[dict[str, dict[str, float]]]] = {False: [], True: []}
    for r in range(rounds):
        for tuned in (False, True):
            results[tuned].append(_run_child(tuned))
            row = results[tuned][-1]
            print(
                f"round {r + 1} {'keep-memory' if tuned else 'default    '} "
                + "  ".join(f"{k} {v['seconds']:.2f}s/{v['faults']:.0f} faults" for k, v in row.items()),
                flush=True,
            )
    print(
        f"\nsd15-arch fp32, 256x256, {rounds} rounds alternating, {CALLS} calls each, medians "
        "(seconds per call, minor page faults per call):"
    )
    for key in results[False][0]:
        base = [row[key]["seconds"] for row in results[False]]
        tuned = [row[key]["seconds"] for row in results[True]]
        ratios = [b / t for b, t in zip(base, tuned, strict=True)]
        faults = (
            statistics.median(row[key]["faults"] for row in results[False]),
            statistics.median(row[key]["faults"] for row in results[True]),
        )
        print(
            f"  {key:22s} default {statistics.median(base):6.2f} s ({faults[0]:.0f} faults)   "
            f"keep-memory {statistics.median(tuned):6.2f} s ({faults[1]:.0f} faults)   "
            f"x{statistics.median(ratios):.2f} (range {min(ratios):.2f}-{max(ratios):.2f})"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    child() if args.child else main(args.rounds)
