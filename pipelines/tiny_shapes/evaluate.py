"""The fixed prompt-fidelity benchmark: 48 prompts x 2 seeds, judged by the analyzer.

    python -m pipelines.tiny_shapes.evaluate            # judge assets/tiny-shapes against FLOORS
    python -m pipelines.tiny_shapes.evaluate --scheduler ddim    # with one of the studio's other schedulers

Exits with status 1 while an attribute is below its floor, 0 once every floor is met (the shipped model meets
them all: shape 92.7% against 85%, see docs/tiny-shapes.md). The test suite runs the same benchmark.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence
from pathlib import Path

import torch
from diffusers import StableDiffusionPipeline
from PIL import Image

from pipelines.loader import make_scheduler
from pipelines.schedulers import SCHEDULERS

from .analyze import fidelity
from .dataset import ATTRIBUTES, BACKGROUNDS, COLOURS, POSITIONS, SHAPES, SIZES, make_prompt
from .language import DEFAULT_GUIDANCE, DEFAULT_STEPS

logger = logging.getLogger(__name__)

EVAL_SEEDS = (0, 1)
FLOORS = {"colour": 0.95, "shape": 0.85, "position": 0.85}


def eval_prompts(count: int = 48) -> list[str]:
    """``count`` full prompts; every shape x colour pair appears, the rest cycles evenly."""
    colours, bgs, positions, sizes = list(COLOURS), list(BACKGROUNDS), list(POSITIONS), list(SIZES)
    out = []
    for i in range(count):
        out.append(
            make_prompt(
                shape=SHAPES[i % len(SHAPES)],
                colour=colours[(i // len(SHAPES)) % len(colours)],
                background=bgs[(i // 2) % len(bgs)],
                position=positions[i % len(positions)],
                size=sizes[(i // 3) % len(sizes)],
            )
        )
    return out


def generate(
    pipe: StableDiffusionPipeline,
    prompts: Sequence[str],
    seed: int,
    steps: int = DEFAULT_STEPS,
    guidance: float = DEFAULT_GUIDANCE,
    batch: int = 16,
) -> list[Image.Image]:
    """Images for ``prompts``, batched; one generator per batch seeded from ``seed`` and the batch index."""
    images: list[Image.Image] = []
    for start in range(0, len(prompts), batch):
        gen = torch.Generator().manual_seed(seed * 100_003 + start)
        out = pipe(
            list(prompts[start : start + batch]),
            num_inference_steps=steps,
            guidance_scale=guidance,
            generator=gen,
        )
        images.extend(out.images)
    return images


def score(images: Sequence[Image.Image], prompts: Sequence[str]) -> dict[str, float]:
    """Per-attribute accuracy (fraction of images whose attribute matches the prompt)."""
    hits = dict.fromkeys(ATTRIBUTES, 0)
    totals = dict.fromkeys(ATTRIBUTES, 0)
    for image, prompt in zip(images, prompts, strict=True):
        for attr, ok in fidelity(image, prompt)["correct"].items():
            hits[attr] += int(ok)
            totals[attr] += 1
    return {a: hits[a] / totals[a] for a in ATTRIBUTES if totals[a]}


def evaluate(
    pipe: StableDiffusionPipeline,
    prompts: Sequence[str] | None = None,
    seeds: Sequence[int] = EVAL_SEEDS,
) -> tuple[dict[str, float], list[Image.Image]]:
    """Run the benchmark; returns (accuracy per attribute, images in prompt-major, seed-minor order)."""
    prompts = list(prompts or eval_prompts())
    per_seed = [generate(pipe, prompts, seed) for seed in seeds]
    images = [per_seed[s][i] for i in range(len(prompts)) for s in range(len(seeds))]
    all_prompts = [p for p in prompts for _ in seeds]
    return score(images, all_prompts), images


def below_floors(accuracy: dict[str, float]) -> dict[str, float]:
    """The attributes whose accuracy is under its floor in FLOORS, with that accuracy."""
    return {a: round(accuracy[a], 3) for a, floor in FLOORS.items() if accuracy[a] < floor}


def grid(images: Sequence[Image.Image], columns: int = 12) -> Image.Image:
    """Tile images into a grid."""
    w, h = images[0].size
    rows = (len(images) + columns - 1) // columns
    canvas = Image.new("RGB", (columns * w, rows * h), (255, 255, 255))
    for i, img in enumerate(images):
        canvas.paste(img, ((i % columns) * w, (i // columns) * h))
    return canvas


def main(argv: Sequence[str] | None = None) -> int:
    """Command line entry point: print the accuracies of a saved pipeline; 1 while a floor is not met."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--model", type=Path, default=Path(__file__).resolve().parents[2] / "assets" / "tiny-shapes"
    )
    parser.add_argument("--grid", type=Path, default=None, help="save the images as a grid PNG")
    parser.add_argument(
        "--scheduler", choices=list(SCHEDULERS), default="default", help="the studio's name of a scheduler"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    pipe = StableDiffusionPipeline.from_pretrained(args.model, use_safetensors=True)
    pipe.set_progress_bar_config(disable=True)
    if args.scheduler != "default":
        pipe.scheduler = make_scheduler(args.scheduler, pipe.scheduler)
    acc, images = evaluate(pipe)
    logger.info("fidelity on %d images: %s", len(images), {k: round(v, 3) for k, v in acc.items()})
    if args.grid:
        grid(images).save(args.grid)
    failures = below_floors(acc)
    if failures:
        logger.info("below the floors %s: %s", FLOORS, failures)
        return 1
    logger.info("every floor is met: %s", FLOORS)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
