"""Process memory (RSS) of the transformer's memory techniques on a CPU: layerwise casting, group offloading.

    .venv/bin/python -m benchmarks.transformer_memory [--width 1024] [--steps 4]

The model is a mid-size Flux: flux-tiny's text encoders, tokenizers and VAE with a wider Flux transformer
(2 double- and 4 single-stream blocks like flux-tiny, `--width` channels: 1024 gives 145 million parameters),
random weights, written once with `save_pretrained` and loaded by every configuration through the studio's
loader (diffusers' `from_pretrained`, as a user's local folder). Each configuration runs in a process of its
own, so that no configuration's memory hides another's: load, apply through the pipeline manager, one call at
64x64. Figures per configuration: the bytes the transformer's parameters hold in memory as it runs; the
process's resident memory after the call (VmRSS, after garbage collection and malloc_trim); and the call's own
peak above what was resident when it started (VmHWM reset through /proc/self/clear_refs). Differences are
against `bf16` (the weights precision these techniques are meant for).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

CONFIGS = (
    "fp32",
    "bf16",
    "bf16+layerwise_casting",
    "bf16+layerwise_casting[originals=memory]",
    "bf16+layerwise_casting[skip=embeddings]",
    "bf16+group_offload",
)
MB = 1024 * 1024


def build_model(folder: Path, width: int) -> int:
    """flux-tiny with a `width`-channel transformer, saved to `folder`; its parameter count."""
    from diffusers import FluxTransformer2DModel

    from pipelines import transformer_architectures as ta
    from pipelines.registry import SPECS

    pipe = ta.build("flux-tiny", SPECS["tiny-shapes"].source)
    heads = width // 128
    torch.manual_seed(0)
    config = {**ta.TINY_FLUX, "num_attention_heads": heads, "attention_head_dim": 128}
    pipe.transformer = FluxTransformer2DModel(**{**config, "axes_dims_rope": (16, 56, 56)}).eval()
    pipe.register_modules(transformer=pipe.transformer)
    pipe.save_pretrained(folder)
    return sum(p.numel() for p in pipe.transformer.parameters())


def measure_one(folder: str, config: str, steps: int) -> dict:
    """In this process: load `folder`, apply `config`, one call; the memory figures."""
    from benchmarks.memory import _trim
    from pipelines import loader
    from studio.manager import PipelineManager
    from studio.measure import bench
    from studio.measure.memory_probe import PeakMemory, rss
    from studio.request import build_request
    from studio.request.configs import parse_config

    optimizations, settings = parse_config("" if config == "fp32" else config)
    request = build_request(
        model=folder,
        prompt="a photo",
        steps=steps,
        width=64,
        height=64,
        optimizations=optimizations,
        settings=settings,
    )
    with PipelineManager(load=loader.load).acquire(request) as prepared:
        _trim()
        with PeakMemory("cpu") as peak:
            bench.run_once(prepared, request)
        # the bytes the weights hold in memory (group offloading's weights on disk hold none)
        weights = sum(p.untyped_storage().nbytes() for p in prepared.pipe.transformer.parameters()) / MB
        _trim()
        return {
            "config": config,
            "weights_mb": weights,
            "resident_mb": rss() / MB,
            "call_peak_mb": peak.added / MB,
        }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--one", nargs=2, metavar=("FOLDER", "CONFIG"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure_one(*args.one, args.steps)))
        return
    from benchmarks.cpu_peers import cpu_line

    print(f"CPU: {cpu_line()}; torch {torch.__version__}", flush=True)
    with tempfile.TemporaryDirectory(prefix="flux-mid-") as folder:
        count = build_model(Path(folder), args.width)
        os.environ["STUDIO_MODEL_ROOTS"] = folder  # the loader reads local folders only inside these roots
        print(
            f"flux-mid: transformer width {args.width}, {count / 1e6:.0f} M parameters, "
            f"64x64, {args.steps} steps"
        )
        rows = []
        for config in CONFIGS:
            out = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "benchmarks.transformer_memory",
                    "--steps",
                    str(args.steps),
                    "--one",
                    folder,
                    config,
                ],
                capture_output=True,
                text=True,
            )
            if out.returncode:
                raise SystemExit(f"{config} failed:\n{out.stderr[-3000:]}")
            rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    base = next(r for r in rows if r["config"] == "bf16")
    print(
        "\n| configuration | transformer weights | resident after the call | vs bf16 "
        "| the call's peak above it |"
    )
    print("|---|---|---|---|---|")
    for r in rows:
        delta = r["resident_mb"] - base["resident_mb"]
        print(
            f"| {r['config']} | {r['weights_mb']:.0f} MB | {r['resident_mb']:.0f} MB | {delta:+.0f} MB "
            f"| {r['call_peak_mb']:.0f} MB |"
        )


if __name__ == "__main__":
    main()
