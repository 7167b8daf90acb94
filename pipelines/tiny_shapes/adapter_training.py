"""Shared plumbing for the tiny-shapes adapters (night LoRA, few-step LoRA, tiny decoder).

Loading the shipped pipeline, encoding seeded scenes to the UNet's latents (optionally redrawn on
another background), adding and saving a UNet LoRA in the diffusers format that
``pipe.load_lora_weights`` reads, a time-budgeted training loop with resumable checkpoints, and
the measurements (judged accuracy, background brightness) the scripts report.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch
from diffusers import StableDiffusionPipeline
from peft import LoraConfig, get_peft_model_state_dict, set_peft_model_state_dict
from PIL import Image

from . import ASSET_DIR
from .analyze import foreground_mask
from .dataset import render_array
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

LORA_DIR = ASSET_DIR.parent / "loras"
ADAPTER_RUNS = RUNS_DIR / "adapters"
ATTENTION_TARGETS = ["to_q", "to_k", "to_v", "to_out.0"]


def load_pipeline(folder: Path = ASSET_DIR) -> StableDiffusionPipeline:
    """The shipped tiny-shapes pipeline (fp32, CPU), progress bar off."""
    pipe = StableDiffusionPipeline.from_pretrained(folder, use_safetensors=True)
    pipe.set_progress_bar_config(disable=True)
    return pipe


def scene_latents(
    pipe: StableDiffusionPipeline, count: int, seed: int, background: str | None = None
) -> tuple[torch.Tensor, list]:
    """UNet-space latents (posterior mean x scaling factor) of ``count`` seeded scenes; (latents, specs).

    With ``background`` set, every scene is redrawn on that background (same shape, colour, place
    and size); the specs returned are the original ones, so their prompts keep the original words.
    Cached under ``runs/adapters/``.
    """
    images, specs = cached_images(count, seed)
    path = ADAPTER_RUNS / f"latents_{background or 'own'}_{count}_{seed}.pt"
    if path.exists():
        return torch.load(path), specs
    if background is not None:
        images = render_array([dataclasses.replace(spec, background=background) for spec in specs])
    vae = pipe.vae
    out = []
    with torch.no_grad():
        for start in range(0, count, 500):
            out.append(vae.encode(to_tensor(images[start : start + 500])).latent_dist.mean)
    latents = torch.cat(out) * vae.config.scaling_factor
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(latents, path)
    return latents, specs


def encode_ids(text_encoder: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    """Prompt embeddings as the pipeline computes them (last hidden state, no grad)."""
    with torch.no_grad():
        return text_encoder(ids)[0]


def add_lora(unet: torch.nn.Module, rank: int, targets: Sequence[str], alpha: float | None = None) -> list:
    """Freeze ``unet``, add a LoRA (peft, gaussian init: starts as the identity); returns its parameters."""
    unet.requires_grad_(False)
    config = LoraConfig(
        r=rank, lora_alpha=alpha or rank, target_modules=list(targets), init_lora_weights="gaussian"
    )
    unet.add_adapter(config)
    return [p for p in unet.parameters() if p.requires_grad]


def save_lora(unet: torch.nn.Module, path: Path, dtype: torch.dtype = torch.float16) -> None:
    """Write the UNet LoRA as a safetensors file that ``load_lora_weights`` reads in full.

    The keys stay in peft's naming (``unet.<module>.lora_A.weight``), as diffusers' LCM-LoRA script
    saves them. ``convert_state_dict_to_diffusers`` renames only the attention projections (to
    ``lora.down`` / ``lora.up``); with other modules targeted too, the mixed file loads without
    its attention layers (diffusers 0.42 infers the peft config from one naming and drops the rest).
    """
    layers = {k: v.detach().to(dtype).contiguous() for k, v in get_peft_model_state_dict(unet).items()}
    path.parent.mkdir(parents=True, exist_ok=True)
    StableDiffusionPipeline.save_lora_weights(
        path.parent, unet_lora_layers=layers, weight_name=path.name, safe_serialization=True
    )
    logger.info("saved %s (%.1f kB)", path, path.stat().st_size / 1e3)


def loaded_lora_modules(unet: torch.nn.Module) -> int:
    """Number of modules of ``unet`` that carry a LoRA (after ``load_lora_weights``)."""
    return sum(1 for m in unet.modules() if hasattr(m, "lora_A") and len(m.lora_A))


def lora_state(unet: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The peft LoRA tensors of ``unet`` (for checkpoints)."""
    return {k: v.detach().clone() for k, v in get_peft_model_state_dict(unet).items()}


def load_lora_state(unet: torch.nn.Module, state: dict[str, torch.Tensor]) -> None:
    """Put checkpointed LoRA tensors back into ``unet``."""
    set_peft_model_state_dict(unet, state)


def with_lora(path: Path, scale: float = 1.0, name: str = "adapter") -> StableDiffusionPipeline:
    """A freshly loaded shipped pipeline with the LoRA file at ``path`` loaded at ``scale``."""
    pipe = load_pipeline()
    pipe.load_lora_weights(path.parent, weight_name=path.name, adapter_name=name)
    pipe.set_adapters([name], adapter_weights=[scale])
    return pipe


def background_brightness(image: Image.Image) -> float:
    """Mean brightness (0-255, mean of R, G, B) of the pixels outside the judge's foreground mask."""
    arr = np.asarray(image.convert("RGB"), dtype=np.float64)
    mask, _ = foreground_mask(arr.copy())
    return float(arr[~mask].mean())


def lora_size(path: Path) -> tuple[int, int]:
    """(number of parameters, largest rank) of a diffusers LoRA file."""
    from safetensors.torch import load_file

    tensors = load_file(path)
    ranks = [v.shape[0] for k, v in tensors.items() if "lora_A" in k or "lora.down" in k]
    return sum(v.numel() for v in tensors.values()), max(ranks)


def train_loop(
    params: list[torch.nn.Parameter],
    loss_fn: Callable[[], torch.Tensor],
    ckpt: Path,
    get_state: Callable[[], dict],
    set_state: Callable[[dict], None],
    on_checkpoint: Callable[[int], None],
    lr: float,
    steps: int | None,
    minutes: float | None,
    checkpoint_every: int = 250,
    warmup: int = 50,
    after_step: Callable[[], None] | None = None,
) -> int:
    """AdamW on ``params`` minimising ``loss_fn()`` (cosine LR, resumable from ``ckpt``); the last step.

    With ``minutes`` the total step count (and so the LR schedule) is re-fitted to the time left
    every 100 steps, so the run ends on time; with ``steps`` only, it is bit-for-bit reproducible.
    Every ``checkpoint_every`` steps (and at the end) the state is saved and ``on_checkpoint(step)``
    runs (evaluation, writing the output file); ``after_step()`` runs after every optimiser step.
    """
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    total = steps or 10**9
    step = 0
    state = load_checkpoint(ckpt)
    if state is not None:
        set_state(state["model"])
        opt.load_state_dict(state["opt"])
        step = state["step"]
        # a finished timed run continues (a larger --minutes) with a provisional total, re-fitted soon
        total = steps or (state["total"] if state["total"] > step else step + 1000)
    t0, start, governor = time.perf_counter(), step, ThreadGovernor()
    deadline = t0 + 60 * minutes if minutes else None
    avg = None
    while step < total and (deadline is None or time.perf_counter() < deadline):
        for group in opt.param_groups:
            group["lr"] = cosine_lr(step, total, lr, warmup=warmup)
        loss = loss_fn()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        if after_step is not None:
            after_step()
        step += 1
        avg = loss.item() if avg is None else 0.98 * avg + 0.02 * loss.item()
        if step % 50 == 0:
            governor.update()
            if deadline is not None and step - start >= 100 and step % 100 == 0:
                reserve = 30.0 if steps is None else 0.0
                total = min(steps or 10**9, refit_total(step, start, t0, deadline, reserve))
            rate = (step - start) / (time.perf_counter() - t0)
            logger.info(
                "step %d/%d  loss %.5f  lr %.2e  %.1f steps/s",
                step,
                total,
                avg,
                opt.param_groups[0]["lr"],
                rate,
            )
        done = step >= total or (deadline is not None and time.perf_counter() >= deadline)
        if step % checkpoint_every == 0 or done:
            save_checkpoint(
                ckpt, {"model": get_state(), "opt": opt.state_dict(), "step": step, "total": total}
            )
            on_checkpoint(step)
    return step
