"""End-to-end latency of the bundled tiny-shapes model: fp32 baseline vs bf16 variants.

    python benchmarks/tiny_shapes_speed.py [--repeats 9] [--fidelity-seeds 1]

One image per call (64x64, 20 steps, classifier-free guidance), timed end to end
(tokenize, encode, denoise, decode, to PIL). Configurations are interleaved in a rotating
order, after warm-up, and reported as medians with the inter-quartile range; ratios are
against the fp32 baseline measured in the same run. Each configuration's prompt fidelity
(48 fixed prompts) is measured too, because a fast configuration that draws the wrong
colour is not an optimization.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from diffusers import StableDiffusionPipeline  # noqa: E402

from benchmarks.timing import times  # noqa: E402
from pipelines.tiny_shapes import ASSET_DIR, DEFAULT_GUIDANCE, DEFAULT_STEPS, EXAMPLE_PROMPT  # noqa: E402
from pipelines.tiny_shapes.evaluate import eval_prompts, evaluate  # noqa: E402

logger = logging.getLogger("tiny_shapes_speed")


@dataclass
class Config:
    """A named way of running the pipeline: the pipeline object and a context to run it in."""

    name: str
    pipe: StableDiffusionPipeline
    context: Callable[[], contextlib.AbstractContextManager]


def load(dtype: torch.dtype, channels_last: bool) -> StableDiffusionPipeline:
    """Load the bundled pipeline in ``dtype``, optionally with channels-last UNet and VAE."""
    pipe = StableDiffusionPipeline.from_pretrained(ASSET_DIR, use_safetensors=True, dtype=dtype)
    pipe.set_progress_bar_config(disable=True)
    if channels_last:
        pipe.unet.to(memory_format=torch.channels_last)
        pipe.vae.to(memory_format=torch.channels_last)
    return pipe


def configs() -> list[Config]:
    """The configurations compared; the first is the baseline."""
    fp32 = load(torch.float32, channels_last=False)
    autocast = lambda: torch.autocast("cpu", dtype=torch.bfloat16)  # noqa: E731
    return [
        Config("fp32 (baseline)", fp32, contextlib.nullcontext),
        Config("fp32 + channels_last", load(torch.float32, channels_last=True), contextlib.nullcontext),
        Config("bf16 autocast", fp32, autocast),
        Config("bf16 weights", load(torch.bfloat16, channels_last=False), contextlib.nullcontext),
        Config(
            "bf16 weights + channels_last", load(torch.bfloat16, channels_last=True), contextlib.nullcontext
        ),
    ]


def run_once(cfg: Config, seed: int = 0) -> float:
    """Seconds for one end-to-end image."""
    gen = torch.Generator().manual_seed(seed)
    start = time.perf_counter()
    with cfg.context(), torch.inference_mode():
        cfg.pipe(
            EXAMPLE_PROMPT, num_inference_steps=DEFAULT_STEPS, guidance_scale=DEFAULT_GUIDANCE, generator=gen
        )
    return time.perf_counter() - start


def time_interleaved(cfgs: list[Config], repeats: int, warmup: int = 2) -> dict[str, list[float]]:
    """Per-configuration timings through the engine's interleaved protocol (A B C, A B C, ...)."""
    return times({cfg.name: (lambda cfg=cfg: run_once(cfg)) for cfg in cfgs}, repeats, warmup)


def fidelity_of(cfg: Config, seeds: tuple[int, ...], prompts: int = 48) -> dict[str, float]:
    """Prompt fidelity (``prompts`` fixed prompts x ``seeds``) of one configuration."""
    with cfg.context(), torch.inference_mode():
        accuracy, _ = evaluate(cfg.pipe, eval_prompts(prompts), seeds=seeds)
    return accuracy


def report(times: dict[str, list[float]], fidelity: dict[str, dict[str, float]]) -> None:
    """Print the table: median, IQR, speed-up vs baseline, and colour/shape/position fidelity."""
    base = statistics.median(next(iter(times.values())))
    print(f"\n{'configuration':30s} {'median s':>9s} {'IQR s':>7s} {'speed-up':>8s}  colour shape position")
    for name, values in times.items():
        med = statistics.median(values)
        q = statistics.quantiles(values, n=4) if len(values) > 1 else [med, med, med]
        acc = fidelity[name]
        print(
            f"{name:30s} {med:9.3f} {q[2] - q[0]:7.3f} {base / med:7.2f}x  "
            f"{acc['colour']:6.1%} {acc['shape']:5.1%} {acc['position']:8.1%}"
        )
    print(
        f"\n{torch.get_num_threads()} threads, torch {torch.__version__}; "
        "a difference inside the IQR is noise, not a speed-up."
    )


def main() -> None:
    """Command line entry point."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--fidelity-seeds", type=int, default=1, help="seeds per prompt for fidelity")
    parser.add_argument("--fidelity-prompts", type=int, default=48, help="fixed prompts for fidelity")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    cfgs = configs()
    times = time_interleaved(cfgs, args.repeats)
    seeds = tuple(range(args.fidelity_seeds))
    fidelity = {cfg.name: fidelity_of(cfg, seeds, args.fidelity_prompts) for cfg in cfgs}
    report(times, fidelity)


if __name__ == "__main__":
    main()
