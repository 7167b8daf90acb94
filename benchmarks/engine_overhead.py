"""Engine overhead against its targets, measured in one process, interleaved, medians.

1. Switching cost between two configurations as a fraction of a cold load (target <= 5%).
2. The CLI's overhead over a direct diffusers call with the same settings (target <= 2%).

Run: .venv/bin/python -m benchmarks.engine_overhead [--rounds 7]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import statistics
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
from diffusers import StableDiffusionPipeline

from benchmarks.timing import describe, overhead, times
from pipelines import loader
from pipelines.registry import SPECS
from studio import cli
from studio.manager import PipelineManager
from studio.request import build_request

PROMPT = "a big red circle on the left, on a white background"
CONFIG_A = ["channels_last", "classic_attention", "vae_slicing"]
CONFIG_B = ["attention_slicing", "vae_tiling"]


def switching(rounds: int) -> None:
    spec = SPECS["tiny-shapes"]
    manager = PipelineManager()
    a = build_request(model="tiny-shapes", prompt=PROMPT, optimizations=CONFIG_A)
    b = build_request(model="tiny-shapes", prompt=PROMPT, optimizations=CONFIG_B)
    trace = build_request(model="tiny-shapes", prompt=PROMPT, optimizations=["jit_trace_unet"])
    with manager.acquire(a):
        pass

    def switch(req):
        def fn():
            with manager.acquire(req) as prepared:
                return prepared

        return fn

    timed = times(
        {
            "cold load": lambda: loader.load(spec),
            "switch A->B": switch(b),
            "switch B->A": switch(a),
            "rebuild after trace": lambda: (switch(trace)(), switch(a)()),
        },
        rounds,
    )
    cold = statistics.median(timed["cold load"])
    print("Switching between configurations (tiny-shapes, CPU):")
    for name, samples in timed.items():
        print(f"  {name:22} {describe(samples)}  = {statistics.median(samples) / cold:.2%} of a cold load")
    print(f"  disk loads by the manager during all switches: {manager.disk_loads} (the first load only)")


def cli_overhead(rounds: int, steps: int) -> None:
    spec = SPECS["tiny-shapes"]
    home = tempfile.mkdtemp(prefix="bench-cli-")
    os.environ["STUDIO_HOME"] = home

    def direct():  # the diffusers docs' script: load, call, save the image
        pipe = StableDiffusionPipeline.from_pretrained(spec.source, dtype=torch.float32, use_safetensors=True)
        pipe.set_progress_bar_config(disable=True)
        image = pipe(
            PROMPT,
            num_inference_steps=steps,
            guidance_scale=spec.guidance,
            width=64,
            height=64,
            generator=torch.Generator("cpu").manual_seed(1),
        ).images[0]
        image.save(f"{home}/direct.png")

    def via_cli():
        with contextlib.redirect_stdout(io.StringIO()):
            assert (
                cli.main(["generate", "--prompt", PROMPT, "--seed", "1", "--steps", str(steps), "--json"])
                == 0
            )

    timed = times({"diffusers script": direct, "python -m studio generate": via_cli}, rounds)
    print(
        f"CLI vs a direct diffusers script (load + {steps} steps + PNG; the CLI also validates, logs to "
        "SQLite and "
        "judges prompt fidelity), in one process:"
    )
    for name, samples in timed.items():
        print(f"  {name:26} {describe(samples)}")
    print(
        f"  CLI overhead: {overhead(timed['python -m studio generate'], timed['diffusers script']):+.2%} "
        "(target: <= 2%)"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    torch.manual_seed(0)
    switching(args.rounds)
    cli_overhead(args.rounds, args.steps)
