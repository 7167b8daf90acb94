"""How fast this CPU's fp32 arithmetic lets an image go: the FLOPs of one image of a random-weight
architecture (counted with FlopCounterMode on the meta device: nothing is allocated or run; the UNet as many
times as the architecture's scheduler calls it), against this machine's measured fp32 matmul peak and its FMA
ceiling (`benchmarks.fma_ceiling`, where a C compiler is at hand); measured latencies read as the GFLOP/s they
sustain, and their share of each.

    .venv/bin/python -m benchmarks.cpu_limit [--model sd15|sdxl] [--side 256] [--steps 10] [--tokens 77]
        [--latency "PyTorch fp32=52.2" --latency "OpenVINO fp32=30.9"] [--target 2.0]

With `--target X`, the first latency given is the reference: what X times faster would have to sustain.
"""

from __future__ import annotations

import argparse
import functools
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
from torch.utils.flop_counter import FlopCounterMode

from benchmarks import fma_ceiling
from benchmarks.cpu_peers import cpu_line
from benchmarks.speed_floors import matmul_peak
from pipelines import architectures
from pipelines.schedulers import denoiser_calls

SIZES = (1024, 2048, 3072)


def _count(run) -> float:
    with FlopCounterMode(display=False) as counter:
        run()
    return float(counter.get_total_flops())


def unet_calls(model: str, steps: int) -> int:
    """UNet calls in one image of `steps` steps with the architecture's own scheduler (PNDM: steps + 1)."""
    return denoiser_calls(architectures.scheduler(model), steps)


def image_flops(model: str, side: int, steps: int, tokens: int) -> dict[str, float]:
    """FLOPs of one image with classifier-free guidance (batch 2 through the denoiser and the text encoders),
    by part: the UNet over all its calls, the VAE decoder, the text encoders."""
    calls = unet_calls(model, steps)  # outside the meta device: a scheduler's timesteps are real numbers
    unet, decoder, encoders = _part_flops(model, side, tokens)
    return {"UNet": calls * unet, "VAE decoder": decoder, "text encoders": encoders}


@functools.lru_cache(maxsize=8)
def _part_flops(model: str, side: int, tokens: int) -> tuple[float, float, float]:
    """FLOPs of one UNet call, one decode and the text encoders, counted on the meta device (once per shape:
    the count does not depend on the steps)."""
    with torch.device("meta"):
        parts = architectures.models(model)
        latent = torch.randn(2, 4, side // 8, side // 8)
        ids = torch.zeros(2, tokens, dtype=torch.long)
        unet = parts["unet"]
        context = torch.randn(2, tokens, unet.config.cross_attention_dim)
        extra = {}
        if unet.config.addition_embed_type == "text_time":
            pooled = parts["text_encoder_2"].config.projection_dim
            added = {"text_embeds": torch.randn(2, pooled), "time_ids": torch.randn(2, 6)}
            extra = {"added_cond_kwargs": added}
        encoders = [parts[k] for k in ("text_encoder", "text_encoder_2") if k in parts]
        return (
            _count(lambda: unet(latent, torch.tensor(10), context, **extra)),
            _count(lambda: parts["vae"].decode(latent[:1])),
            sum(_count(lambda e=e: e(ids)) for e in encoders),
        )


def fp32_peak() -> float:
    """The best fp32 matmul rate here, GFLOP/s (torch.mm with this process's threads, best of 5 per size)."""
    return max(matmul_peak(torch.float32, n, reps=5) for n in SIZES)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", choices=("sd15", "sdxl"), default="sd15")
    parser.add_argument("--side", type=int, default=256)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--tokens", type=int, default=77, help="prompt length the text encoders read")
    parser.add_argument("--latency", action="append", default=[], metavar="NAME=SECONDS")
    parser.add_argument("--target", type=float, default=None, help="a speedup over the first latency")
    args = parser.parse_args()
    latencies = {}
    for item in args.latency:
        name, _, seconds = item.rpartition("=")
        latencies[name or item] = float(seconds)
    flops = image_flops(args.model, args.side, args.steps, args.tokens)
    total = sum(flops.values()) / 1e9
    peak = fp32_peak()
    try:
        ceiling: float | None = fma_ceiling.ceiling(torch.get_num_threads())
    except RuntimeError as exc:
        ceiling = None
        print(f"FMA ceiling not measured: {exc}")
    print(f"CPU: {cpu_line()}; {torch.get_num_threads()} threads; torch {torch.__version__}")
    size = f"{args.side}x{args.side}, {args.steps} steps ({unet_calls(args.model, args.steps)} UNet calls)"
    print(f"{args.model}-arch {size}, guidance, a {args.tokens}-token prompt:")
    for name, value in flops.items():
        print(f"  {name:14} {value / 1e9:9,.1f} GFLOP ({value / 1e9 / total:.0%})")
    print(f"  {'per image':14} {total:9,.1f} GFLOP")
    print(f"fp32 matmul peak here: {peak:.0f} GFLOP/s (best over n = {', '.join(map(str, SIZES))})")
    print(f"an image at that peak: {total / peak:.1f} s")
    if ceiling is not None:
        print(
            f"fp32 FMA ceiling here: {ceiling:.0f} GFLOP/s (registers only); "
            f"an image at it: {total / ceiling:.1f} s"
        )

    def shares(rate: float) -> str:
        of_ceiling = f", {rate / ceiling:.0%} of the FMA ceiling" if ceiling is not None else ""
        return f"{rate / peak:.0%} of the matmul peak{of_ceiling}"

    for name, seconds in latencies.items():
        print(
            f"  {name}: {seconds:.2f} s = {total / seconds:.0f} GFLOP/s sustained, {shares(total / seconds)}"
        )
    if args.target and latencies:
        name, seconds = next(iter(latencies.items()))
        goal = seconds / args.target
        print(
            f"x{args.target:g} against {name}: {goal:.2f} s, {total / goal:.0f} GFLOP/s sustained, "
            f"{shares(total / goal)}"
        )


if __name__ == "__main__":
    main()
