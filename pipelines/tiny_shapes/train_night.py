"""The ``night`` style LoRA: tiny-shapes draws the same shapes on a black background.

    nice -n 19 .venv/bin/python -m pipelines.tiny_shapes.train_night --minutes 12
    nice -n 19 .venv/bin/python -m pipelines.tiny_shapes.train_night --measure   # the figures only

The training targets are the dataset's scenes redrawn on the black background (same shape, colour,
place and size) while the prompts keep their original background words (or drop them, as the
dataset's prompts sometimes do), so at scale 1 any prompt draws on black, and at lower scales the
background lies in between. UNet LoRA, rank 4 on the attention projections (to_q, to_k, to_v,
to_out.0), plain v-prediction MSE; the text encoder and the UNet stay frozen. Output:
``assets/loras/night.safetensors`` (fp16, diffusers format):

    pipe.load_lora_weights("assets/loras", weight_name="night.safetensors", adapter_name="night")
    pipe.set_adapters(["night"], adapter_weights=[1.0])

Seeded and resumable (``runs/adapters/night/ckpt.pt``).
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

import torch

from . import adapter_training as at
from .evaluate import eval_prompts, evaluate, generate, grid, score
from .language import DEFAULT_GUIDANCE
from .models import make_train_scheduler
from .prompts import PromptSampler

logger = logging.getLogger(__name__)

OUT = at.LORA_DIR / "night.safetensors"
RUN = at.ADAPTER_RUNS / "night"
RANK = 4


def train(args: argparse.Namespace) -> None:
    """Train the night LoRA and write it to ``args.out``."""
    torch.manual_seed(args.seed)
    pipe = at.load_pipeline()
    latents, specs = at.scene_latents(pipe, args.count, args.seed, background="black")
    prompts = PromptSampler(pipe.tokenizer, specs, seed=args.seed)
    unet, text_encoder = pipe.unet, pipe.text_encoder.requires_grad_(False)
    noise_sched = make_train_scheduler()
    params = at.add_lora(unet, RANK, at.ATTENTION_TARGETS)
    logger.info("night LoRA: %d parameters, %d latents", sum(p.numel() for p in params), len(latents))

    def loss_fn() -> torch.Tensor:
        idx = torch.randint(0, len(latents), (args.batch,))
        x0 = latents[idx]
        cond = at.encode_ids(text_encoder, prompts.batch(idx.tolist()))
        noise = torch.randn_like(x0)
        t = torch.randint(0, noise_sched.config.num_train_timesteps, (args.batch,))
        pred = unet(noise_sched.add_noise(x0, noise, t), t, cond).sample
        return (pred - noise_sched.get_velocity(x0, noise, t)).pow(2).mean()

    def on_checkpoint(step: int) -> None:
        at.save_lora(unet, args.out)
        quick = eval_prompts(12)
        images = generate(pipe, quick, seed=0, guidance=DEFAULT_GUIDANCE)
        grid(images).save(RUN / f"samples_{step:05d}.png")
        bright = sum(at.background_brightness(im) for im in images) / len(images)
        logger.info("step %d: background %.1f, %s", step, bright, score(images, quick))

    at.train_loop(
        params,
        loss_fn,
        RUN / "ckpt.pt",
        lambda: at.lora_state(unet),
        lambda state: at.load_lora_state(unet, state),
        on_checkpoint,
        lr=args.lr,
        steps=args.steps,
        minutes=None if args.steps else args.minutes,
        checkpoint_every=500,
    )


def measure(path: Path) -> dict[float, dict[str, float]]:
    """Background brightness and judged accuracy at LoRA scales 0, 0.5 and 1 (48 prompts x 2 seeds)."""
    results = {}
    pipe = at.with_lora(path, 1.0, name="night")
    for scale in (0.0, 0.5, 1.0):
        pipe.set_adapters(["night"], adapter_weights=[scale])
        acc, images = evaluate(pipe)
        acc["background_brightness"] = sum(at.background_brightness(im) for im in images) / len(images)
        results[scale] = acc
        grid(images).save(RUN / f"eval_scale_{scale}.png")
        logger.info("scale %.1f: %s", scale, {k: round(v, 3) for k, v in acc.items()})
    return results


def main() -> None:
    """Command line entry point."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--minutes", type=float, default=12.0, help="time budget (the LR schedule fits it)")
    parser.add_argument("--steps", type=int, default=None, help="fixed step count (bit-for-bit reproducible)")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--count", type=int, default=8000, help="number of training scenes")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--measure", action="store_true", help="only measure the saved LoRA")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    RUN.mkdir(parents=True, exist_ok=True)
    if not args.measure:
        train(args)
    measure(args.out)


if __name__ == "__main__":
    main()
