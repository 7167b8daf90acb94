"""Stage 1 of training: the AutoencoderKL (64x64 RGB <-> 4x8x8 latents).

    python -m pipelines.tiny_shapes.train_vae --steps 3500 --batch 16

    taskset -c 0 python -m pipelines.tiny_shapes.train_vae --decoder-only --minutes 55 --batch 16

Seeded and resumable: the checkpoints in ``runs/vae/`` are picked up automatically.
The loss is a foreground-weighted L1 (shapes are small; the background is most pixels), an
L1 on the shape's mean colour, and a tiny KL term as in Stable Diffusion's autoencoder; the
decoder-only stage adds an edge (image-gradient) loss against blurred corners.

``--decoder-only`` freezes the encoder (so the latents the UNet trains on never change) and
keeps improving the decoder on the precomputed latents, in parallel with the UNet training.
"""

from __future__ import annotations

import argparse
import logging
import time
from pathlib import Path

import numpy as np
import torch
from diffusers import AutoencoderKL
from PIL import Image

from . import ASSET_DIR, models
from .runs_io import (
    RUNS_DIR,
    ThreadGovernor,
    cached_images,
    cosine_lr,
    load_checkpoint,
    refit_total,
    save_checkpoint,
    to_tensor,
)

logger = logging.getLogger(__name__)

VAE_DIR = RUNS_DIR / "vae"
DECODER_CKPT = VAE_DIR / "decoder_ckpt.pt"
KL_WEIGHT = 1e-6
FG_WEIGHT = 4.0
COLOUR_WEIGHT = 1.0
EDGE_WEIGHT = 2.0  # decoder-only stage: L1 of image gradients, against blurred corners on small shapes


def foreground(x: torch.Tensor) -> torch.Tensor:
    """(N, 1, H, W) mask of the pixels that differ from the top-left (background) pixel."""
    return (x - x[:, :, :1, :1]).abs().amax(dim=1, keepdim=True).gt(0.1).float()


def reconstruction_loss(recon: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(loss, plain L1): foreground-weighted L1 plus the L1 of the shape's mean colour.

    Shapes are a small part of the picture, so plain L1 lets the decoder blur them; the
    mean-colour term keeps blue, cyan and purple apart on small shapes.
    """
    fg = foreground(x)
    err = (recon - x).abs()
    area = fg.sum(dim=(2, 3)).clamp(min=1.0)
    colour = ((recon - x) * fg).sum(dim=(2, 3)).div(area).abs().mean()
    return (err * (1 + FG_WEIGHT * fg)).mean() + COLOUR_WEIGHT * colour, err.mean()


def vae_loss(vae: torch.nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(total loss, plain L1) for a batch in [-1, 1]."""
    posterior = vae.encode(x).latent_dist
    loss, l1 = reconstruction_loss(vae.decode(posterior.sample()).sample, x)
    return loss + KL_WEIGHT * posterior.kl().mean(), l1


def edge_loss(recon: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """L1 between the horizontal and vertical differences of ``recon`` and ``x`` (sharp edges, corners)."""
    dx = (recon.diff(dim=3) - x.diff(dim=3)).abs().mean()
    dy = (recon.diff(dim=2) - x.diff(dim=2)).abs().mean()
    return dx + dy


def decoder_loss(vae: torch.nn.Module, z: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(reconstruction loss + edge loss, plain L1) of decoding latents ``z`` against images ``x``."""
    recon = vae.decode(z).sample
    loss, l1 = reconstruction_loss(recon, x)
    return loss + EDGE_WEIGHT * edge_loss(recon, x), l1


def load_vae() -> AutoencoderKL:
    """The newest trained VAE: the decoder-only checkpoint, else the joint one, else the shipped one.

    Without any checkpoint (a fresh checkout) the VAE in ``assets/tiny-shapes`` is used: its encoder
    is the one the shipped UNet was trained on, so training can continue from the shipped weights.
    """
    path = DECODER_CKPT if DECODER_CKPT.exists() else VAE_DIR / "ckpt.pt"
    if not path.exists():
        logger.info("no VAE checkpoint in %s: using the shipped VAE", VAE_DIR)
        return AutoencoderKL.from_pretrained(ASSET_DIR, subfolder="vae").eval().requires_grad_(False)
    vae = models.make_vae()
    vae.load_state_dict(torch.load(path, weights_only=False)["model"])
    return vae.eval().requires_grad_(False)


def encode_dataset(vae: AutoencoderKL, count: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, list]:
    """Posterior means and stds of every training image (cached: the encoder is frozen after stage 1)."""
    path = RUNS_DIR / f"latents_{count}_{seed}.pt"
    images, specs = cached_images(count, seed)
    if path.exists():
        mean, std = torch.load(path)
        return mean, std, specs
    logger.info("encoding %d images to latents", count)
    means, stds = [], []
    with torch.no_grad():
        for start in range(0, count, 500):
            dist = vae.encode(to_tensor(images[start : start + 500])).latent_dist
            means.append(dist.mean)
            stds.append(dist.std)
    mean, std = torch.cat(means), torch.cat(stds)
    torch.save((mean, std), path)
    return mean, std, specs


def save_grid(vae: torch.nn.Module, x: torch.Tensor, path: Path) -> None:
    """Originals (top row) over reconstructions (bottom row)."""
    with torch.no_grad():
        recon = vae.decode(vae.encode(x).latent_dist.mode()).sample
    rows = torch.cat([x, recon.clamp(-1, 1)], dim=2)
    arr = ((rows + 1) * 127.5).round().byte().permute(2, 0, 3, 1).reshape(128, -1, 3).numpy()
    Image.fromarray(arr).save(path)


def train(steps: int, batch: int, lr: float, seed: int, count: int) -> torch.nn.Module:
    """Train (or resume) the VAE for ``steps`` steps; returns it."""
    torch.manual_seed(seed)
    np.random.seed(seed)
    images, _ = cached_images(count, seed)
    data = to_tensor(images)
    vae = models.make_vae()
    opt = torch.optim.AdamW(vae.parameters(), lr=lr, weight_decay=0.0)
    state = load_checkpoint(VAE_DIR / "ckpt.pt")
    start = 0
    if state is not None:
        vae.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        start = state["step"]
    logger.info("VAE: %d parameters, %d training images", models.count_params(vae), len(data))
    t0, l1_avg, governor = time.perf_counter(), None, ThreadGovernor()
    for step in range(start, steps):
        for group in opt.param_groups:
            group["lr"] = cosine_lr(step, steps, lr, warmup=100)
        x = data[torch.randint(0, len(data), (batch,))]
        loss, l1 = vae_loss(vae, x)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        l1_avg = l1.item() if l1_avg is None else 0.98 * l1_avg + 0.02 * l1.item()
        if (step + 1) % 50 == 0:
            governor.update()
            rate = (step + 1 - start) * batch / (time.perf_counter() - t0)
            logger.info("step %d/%d  L1 %.4f  %.0f img/s", step + 1, steps, l1_avg, rate)
        if (step + 1) % 500 == 0 or step + 1 == steps:
            save_checkpoint(
                VAE_DIR / "ckpt.pt", {"model": vae.state_dict(), "opt": opt.state_dict(), "step": step + 1}
            )
            save_grid(vae.eval(), data[:12], VAE_DIR / f"recon_{step + 1:05d}.png")
            vae.train()
    return vae


def train_decoder(minutes: float, batch: int, lr: float, seed: int, count: int) -> None:
    """Fine-tune only the decoder on frozen-encoder latents for ``minutes`` (resumable)."""
    torch.manual_seed(seed)
    vae = models.make_vae()
    vae.load_state_dict(torch.load(VAE_DIR / "ckpt.pt", weights_only=False)["model"])
    mean, _, _ = encode_dataset(vae.eval(), count, seed)
    data = to_tensor(cached_images(count, seed)[0])
    vae.encoder.requires_grad_(False)
    vae.quant_conv.requires_grad_(False)
    params = [p for p in vae.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    state = load_checkpoint(DECODER_CKPT)
    step, total = (state["step"], state["total"]) if state else (0, 10**9)
    if state:
        vae.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
    t0, start, deadline, governor = (
        time.perf_counter(),
        step,
        time.perf_counter() + 60 * minutes,
        ThreadGovernor(),
    )
    vae.decoder.train()
    while step < total and time.perf_counter() < deadline:
        for group in opt.param_groups:
            group["lr"] = cosine_lr(step, total, lr, warmup=50)
        idx = torch.randint(0, len(data), (batch,))
        loss, l1 = decoder_loss(vae, mean[idx], data[idx])  # posterior means: see train.py
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        step += 1
        if step % 100 == 0:
            governor.update()
            total = refit_total(step, start, t0, deadline) if step - start >= 100 else total
            logger.info("decoder step %d/%d  L1 %.4f", step, total, l1.item())
        if step % 500 == 0 or step >= total or time.perf_counter() >= deadline:
            save_checkpoint(
                DECODER_CKPT,
                {"model": vae.state_dict(), "opt": opt.state_dict(), "step": step, "total": total},
            )
            save_grid(vae.eval(), data[:12], VAE_DIR / f"decoder_recon_{step:05d}.png")
            vae.decoder.train()


def main() -> None:
    """Command line entry point."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--count", type=int, default=24000, help="number of training images")
    parser.add_argument("--decoder-only", action="store_true", help="fine-tune the decoder on frozen latents")
    parser.add_argument("--minutes", type=float, default=45.0, help="time budget of --decoder-only")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    if args.decoder_only:
        train_decoder(args.minutes, args.batch, args.lr, args.seed, args.count)
    else:
        train(args.steps, args.batch, args.lr, args.seed, args.count)


if __name__ == "__main__":
    main()
