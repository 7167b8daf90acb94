"""Will it fit: the peak-memory estimate made before each run against the peak the run then measures.

    python -m benchmarks.memory_estimate            # tiny-shapes and sd15-arch, CPU, a few sizes and batches
    python -m benchmarks.memory_estimate --quick    # tiny-shapes only

Each case runs in a fresh process (a process's allocator keeps what earlier runs freed, which would flatter
or spoil later cases), through the engine, one denoising step (the peak does not grow with steps). The run
log is fresh too, so no correction from history applies: this is the raw estimate. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile

from studio import devices

CASES = {
    "tiny-shapes": [(64, 1, ()), (64, 4, ()), (128, 2, ()), (64, 1, ("bf16",))],
    "sd15-arch": [(256, 1, ()), (256, 2, ()), (384, 1, ()), (512, 1, ()), (512, 1, ("vae_tiling",))],
}


def one(model: str, side: int, batch: int, optimizations: list[str]) -> dict:
    """Estimate, then run and measure, in this process; returns both in MB."""
    import torch

    from studio.engine import Studio, memory_estimate
    from studio.request import build_request

    torch.set_num_threads(2)
    with tempfile.TemporaryDirectory() as home:
        studio = Studio(db_path=f"{home}/runs.db", outputs=f"{home}/out")
        request = build_request(
            model=model,
            prompt="a red circle",
            steps=1,
            width=side,
            height=side,
            batch=batch,
            optimizations=optimizations,
        )
        before = memory_estimate.estimate(studio.manager, request, studio.runlog)
        measured = studio.generate(request).metrics["peak_memory"]
    return {"estimate_mb": before.peak / 2**20, "measured_mb": measured / 2**20, **before.as_json()}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(*json.loads(args.one))))
        return
    print(f"CPU: {devices.detect().cpu_name}; fresh process per case; one step; no run-log correction\n")
    print("| model | size | batch | techniques | estimate | measured peak | estimate / measured |")
    print("|---|---|---|---|---|---|---|")
    for model, cases in CASES.items():
        if args.quick and model != "tiny-shapes":
            continue
        for side, batch, optimizations in cases:
            spec = json.dumps([model, side, batch, list(optimizations)])
            out = subprocess.run(
                [sys.executable, "-m", "benchmarks.memory_estimate", "--one", spec],
                capture_output=True,
                text=True,
                check=True,
            )
            r = json.loads(out.stdout.strip().splitlines()[-1])
            ratio = r["estimate_mb"] / r["measured_mb"]
            techniques = ", ".join(optimizations) or "-"
            print(
                f"| {model} | {side}x{side} | {batch} | {techniques} | {r['estimate_mb']:,.0f} MB "
                f"| {r['measured_mb']:,.0f} MB | {ratio:.2f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
