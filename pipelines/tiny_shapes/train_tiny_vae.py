"""A tiny decoder for tiny-shapes: a diffusers ``AutoencoderTiny`` (TAESD-like), distilled from its VAE.

    nice -n 19 .venv/bin/python -m pipelines.tiny_shapes.train_tiny_vae --minutes 12
    nice -n 19 .venv/bin/python -m pipelines.tiny_shapes.train_tiny_vae --measure   # the figures only

Swap it in as ``pipe.vae``: the pipeline decodes ``latents / vae.config.scaling_factor``, and the
tiny autoencoder's ``scaling_factor`` is 1.0, so it receives the UNet-space latents themselves
(the full VAE's latents already multiplied by its scaling factor 0.583) and returns images in
[-1, 1]. 8 latent channels, 3 upsamplings (8x8x8 -> 64x64). The decoder has no normalisation
and no attention (32 channels, 3/3/2/0 blocks), unlike the full decoder (GroupNorm, mid-block
attention, 64/64/32/16 channels).

Training: the decoder reproduces the full VAE's decoded images from the same latents, with the
full VAE's own losses (foreground-weighted L1, the shape's mean colour, image-gradient L1), on
4,000 seeded scenes' latents (posterior means) and the same latents with a little Gaussian
jitter (the UNet's latents are not exactly posterior means); the small encoder learns to map an
image to the full encoder's scaled posterior mean (MSE, a few images per batch), so the folder
is a whole autoencoder, though the studio only decodes. Seeded and resumable
(``runs/adapters/tiny_vae/ckpt.pt``); output ``assets/tiny-shapes-tiny-vae/``.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import time
from pathlib import Path

import numpy as np
import torch
from diffusers import AutoencoderTiny
from PIL import Image

from . import ASSET_DIR
from . import adapter_training as at
from .evaluate import EVAL_SEEDS, eval_prompts, grid, score
from .language import DEFAULT_GUIDANCE, DEFAULT_STEPS
from .models import LATENT_CHANNELS
from .runs_io import cached_images, to_tensor
from .train_vae import edge_loss, reconstruction_loss

logger = logging.getLogger(__name__)

OUT = ASSET_DIR.parent / "tiny-shapes-tiny-vae"
RUN = at.ADAPTER_RUNS / "tiny_vae"
EDGE_WEIGHT = 2.0  # as the full decoder's own fine-tuning (train_vae.py)
JITTER = 0.1  # std of the Gaussian jitter added to half of the training latents (latents have std ~1)


def make_tiny_vae() -> AutoencoderTiny:
    """A fresh AutoencoderTiny for tiny-shapes latents (8 channels, 8x, scaling factor 1)."""
    return AutoencoderTiny(
        latent_channels=LATENT_CHANNELS,
        encoder_block_out_channels=(32, 32, 32, 32),
        num_encoder_blocks=(1, 1, 1, 1),
        decoder_block_out_channels=(32, 32, 32, 32),
        num_decoder_blocks=(3, 3, 2, 0),
        scaling_factor=1.0,
    )


def decode_images(vae: torch.nn.Module, latents: torch.Tensor) -> torch.Tensor:
    """What the pipeline does with UNet-space latents: decode ``latents / scaling_factor``; [-1, 1]."""
    with torch.no_grad():
        out = [vae.decode(z / vae.config.scaling_factor).sample for z in latents.split(256)]
    return torch.cat(out).clamp(-1, 1)


def training_data(
    pipe, count: int, seed: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(latents, full-VAE images of them, rendered scenes, their latents): clean and jittered, cached."""
    path = RUN / f"data_{count}_{seed}.pt"
    latents, _ = at.scene_latents(pipe, count, seed)
    scenes = to_tensor(cached_images(count, seed)[0])
    if path.exists():
        z, targets = torch.load(path)
        return z, targets, scenes, latents
    gen = torch.Generator().manual_seed(seed)
    z = torch.cat([latents, latents + JITTER * torch.randn(latents.shape, generator=gen)])
    logger.info("decoding %d latents with the full VAE", len(z))
    targets = decode_images(pipe.vae, z)
    RUN.mkdir(parents=True, exist_ok=True)
    torch.save((z, targets), path)
    return z, targets, scenes, latents


def train(args: argparse.Namespace) -> None:
    """Distil the tiny autoencoder and save it to ``args.out``."""
    torch.manual_seed(args.seed)
    pipe = at.load_pipeline()
    z, targets, scenes, scene_z = training_data(pipe, args.count, args.seed)
    tiny = make_tiny_vae()
    logger.info(
        "tiny decoder %d params (full decoder %d), tiny encoder %d",
        sum(p.numel() for p in tiny.decoder.parameters()),
        sum(p.numel() for p in pipe.vae.decoder.parameters()),
        sum(p.numel() for p in tiny.encoder.parameters()),
    )

    def loss_fn() -> torch.Tensor:
        idx = torch.randint(0, len(z), (args.batch,))
        recon = tiny.decode(z[idx]).sample
        target = targets[idx]
        loss = reconstruction_loss(recon, target)[0] + EDGE_WEIGHT * edge_loss(recon, target)
        j = torch.randint(0, len(scenes), (max(1, args.batch // 8),))
        return loss + (tiny.encode(scenes[j]).latents - scene_z[j]).pow(2).mean()

    def on_checkpoint(step: int) -> None:
        tiny.save_pretrained(args.out, safe_serialization=True)
        # AutoencoderTiny registers a `block_out_channels` its own __init__ does not take: every load of the
        # saved config would warn about it
        config = Path(args.out) / "config.json"
        config.write_text(
            json.dumps(
                {k: v for k, v in json.loads(config.read_text()).items() if k != "block_out_channels"},
                indent=2,
                sort_keys=True,
            )
            + "\n"
        )
        with torch.no_grad():
            rows = torch.cat([targets[:12], tiny.decode(z[:12]).sample.clamp(-1, 1)], dim=2)
        arr = ((rows + 1) * 127.5).round().byte().permute(2, 0, 3, 1).reshape(128, -1, 3).numpy()
        Image.fromarray(arr).save(RUN / f"recon_{step:05d}.png")

    at.train_loop(
        list(tiny.parameters()),
        loss_fn,
        RUN / "ckpt.pt",
        tiny.state_dict,
        tiny.load_state_dict,
        on_checkpoint,
        lr=args.lr,
        steps=args.steps,
        minutes=None if args.steps else args.minutes,
        checkpoint_every=1000,
    )


def eval_latents(pipe) -> torch.Tensor:
    """The benchmark's 96 generated latents (48 prompts x 2 seeds, 20 steps, guidance 6), cached."""
    path = RUN / "eval_latents.pt"
    if path.exists():
        return torch.load(path)
    out = []
    for seed in EVAL_SEEDS:
        prompts = eval_prompts()
        for start in range(0, len(prompts), 16):
            gen = torch.Generator().manual_seed(seed * 100_003 + start)
            res = pipe(
                prompts[start : start + 16],
                num_inference_steps=DEFAULT_STEPS,
                guidance_scale=DEFAULT_GUIDANCE,
                generator=gen,
                output_type="latent",
            )
            out.append(res.images)
    latents = torch.cat(out)
    RUN.mkdir(parents=True, exist_ok=True)
    torch.save(latents, path)
    return latents


def to_uint8(images: torch.Tensor) -> np.ndarray:
    """[-1, 1] (N, 3, H, W) -> uint8 (N, H, W, 3), rounded as the pipeline's image processor does."""
    return ((images / 2 + 0.5).clamp(0, 1) * 255).round().byte().permute(0, 2, 3, 1).numpy()


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    """Peak signal-to-noise ratio (dB) between two uint8 images."""
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return float(10 * np.log10(255.0**2 / max(mse, 1e-12)))


def decode_ms(vae: torch.nn.Module, latent: torch.Tensor, rounds: int = 7, calls: int = 20) -> list[float]:
    """Per-round median milliseconds of one ``vae.decode`` of a single latent (`calls` timed per round)."""
    with torch.no_grad():
        for _ in range(5):
            vae.decode(latent / vae.config.scaling_factor)
        out = []
        for _ in range(rounds):
            times = []
            for _ in range(calls):
                t = time.perf_counter()
                vae.decode(latent / vae.config.scaling_factor)
                times.append(time.perf_counter() - t)
            out.append(1000 * statistics.median(times))
    return out


def measure(folder: Path) -> dict[str, float]:
    """PSNR against the full VAE over the benchmark's latents, judged accuracy, decode ms (interleaved)."""
    pipe = at.load_pipeline()
    tiny = AutoencoderTiny.from_pretrained(folder).eval()
    latents = eval_latents(pipe)
    full_imgs, tiny_imgs = to_uint8(decode_images(pipe.vae, latents)), to_uint8(decode_images(tiny, latents))
    values = [psnr(a, b) for a, b in zip(full_imgs, tiny_imgs, strict=True)]
    prompts = [p for p in eval_prompts() for _ in EVAL_SEEDS]
    order = [s * 48 + i for i in range(48) for s in range(len(EVAL_SEEDS))]  # prompt-major, seed-minor
    full_pil = [Image.fromarray(full_imgs[k]) for k in order]
    tiny_pil = [Image.fromarray(tiny_imgs[k]) for k in order]
    grid(full_pil + tiny_pil).save(RUN / "eval_full_then_tiny.png")
    torch.set_num_threads(1)  # one core each: the figure does not depend on what else runs on the other
    full_t, tiny_t = [], []
    for _ in range(7):  # interleaved rounds
        full_t += decode_ms(pipe.vae, latents[:1], rounds=1)
        tiny_t += decode_ms(tiny, latents[:1], rounds=1)
    result = {
        "psnr_mean": statistics.mean(values),
        "psnr_min": min(values),
        "full_ms": statistics.median(full_t),
        "tiny_ms": statistics.median(tiny_t),
        "threads": torch.get_num_threads(),
        "accuracy_full": score(full_pil, prompts),
        "accuracy_tiny": score(tiny_pil, prompts),
    }
    result["speedup"] = result["full_ms"] / result["tiny_ms"]
    (RUN / "measure.json").write_text(json.dumps(result, indent=1))
    logger.info("tiny VAE: %s", result)
    return result


def main() -> None:
    """Command line entry point."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--minutes", type=float, default=12.0, help="time budget (the LR schedule fits it)")
    parser.add_argument("--steps", type=int, default=None, help="fixed step count (bit-for-bit reproducible)")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--count", type=int, default=4000, help="number of training scenes")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--measure", action="store_true", help="only measure the saved autoencoder")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    RUN.mkdir(parents=True, exist_ok=True)
    if not args.measure:
        train(args)
    measure(args.out)


if __name__ == "__main__":
    main()
