"""The tiny-shapes architecture: configs for every component and how to assemble the pipeline.

Sizes were chosen so that a 20-step, guided 64x64 generation stays well under a second on
two CPU cores while the UNet is big enough to learn colour, shape, position and size.
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch
from diffusers import (
    AutoencoderKL,
    DDPMScheduler,
    DPMSolverMultistepScheduler,
    StableDiffusionPipeline,
    UNet2DConditionModel,
)
from transformers import CLIPTextConfig, CLIPTextModel, CLIPTokenizer

from .language import DEFAULT_GUIDANCE, DEFAULT_STEPS, EXAMPLE_PROMPT, IMAGE_SIZE  # noqa: F401

logger = logging.getLogger(__name__)


LATENT_SIZE = 8
LATENT_CHANNELS = 8  # 4 (SD's) lost the hue and corners of small shapes: see docs/tiny-shapes.md
TEXT_HIDDEN = 64

SCHEDULER_KWARGS = {
    "num_train_timesteps": 1000,
    "beta_schedule": "linear",
    "beta_start": 0.0001,
    "beta_end": 0.02,
    "prediction_type": "v_prediction",
    "timestep_spacing": "trailing",
    "steps_offset": 1,
}


def vae_config(scaling_factor: float = 1.0) -> dict:
    """AutoencoderKL with 4 blocks (3 downsamplings: 64x64 -> 8x8), ``LATENT_CHANNELS`` latent channels."""
    return {
        "in_channels": 3,
        "out_channels": 3,
        "down_block_types": ["DownEncoderBlock2D"] * 4,
        "up_block_types": ["UpDecoderBlock2D"] * 4,
        "block_out_channels": [16, 32, 64, 64],
        "layers_per_block": 1,
        "latent_channels": LATENT_CHANNELS,
        "norm_num_groups": 8,
        "sample_size": IMAGE_SIZE,
        "scaling_factor": scaling_factor,
    }


def unet_config() -> dict:
    """A two-level conditional UNet on 8x8 latents, cross-attention at every level."""
    return {
        "sample_size": LATENT_SIZE,
        "in_channels": LATENT_CHANNELS,
        "out_channels": LATENT_CHANNELS,
        "down_block_types": ["CrossAttnDownBlock2D", "CrossAttnDownBlock2D"],
        "up_block_types": ["CrossAttnUpBlock2D", "CrossAttnUpBlock2D"],
        "block_out_channels": [48, 96],
        "layers_per_block": 1,
        "cross_attention_dim": TEXT_HIDDEN,
        "attention_head_dim": 4,
        "norm_num_groups": 16,
    }


def text_config(tokenizer: CLIPTokenizer) -> CLIPTextConfig:
    """A 2-layer CLIP text encoder sized to the tokenizer's vocabulary and max length."""
    return CLIPTextConfig(
        vocab_size=len(tokenizer),
        hidden_size=TEXT_HIDDEN,
        intermediate_size=4 * TEXT_HIDDEN,
        num_hidden_layers=2,
        num_attention_heads=4,
        max_position_embeddings=tokenizer.model_max_length,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )


def make_vae(scaling_factor: float = 1.0) -> AutoencoderKL:
    """A fresh (randomly initialised) VAE."""
    return AutoencoderKL(**vae_config(scaling_factor))


def make_unet() -> UNet2DConditionModel:
    """A fresh (randomly initialised) UNet."""
    return UNet2DConditionModel(**unet_config())


def make_text_encoder(tokenizer: CLIPTokenizer) -> CLIPTextModel:
    """A fresh (randomly initialised) text encoder."""
    return CLIPTextModel(text_config(tokenizer))


def make_scheduler() -> DPMSolverMultistepScheduler:
    """The inference scheduler: DPM-Solver++ (2nd order), good at 20 steps."""
    return DPMSolverMultistepScheduler(algorithm_type="dpmsolver++", solver_order=2, **SCHEDULER_KWARGS)


def make_train_scheduler() -> DDPMScheduler:
    """The training noise schedule (same betas and prediction type as inference)."""
    return DDPMScheduler(**SCHEDULER_KWARGS)


def assemble(
    vae: AutoencoderKL,
    text_encoder: CLIPTextModel,
    tokenizer: CLIPTokenizer,
    unet: UNet2DConditionModel,
) -> StableDiffusionPipeline:
    """Put the components together as a StableDiffusionPipeline without safety checker."""
    return StableDiffusionPipeline(
        vae=vae,
        text_encoder=text_encoder,
        tokenizer=tokenizer,
        unet=unet,
        scheduler=make_scheduler(),
        safety_checker=None,
        feature_extractor=None,
        requires_safety_checker=False,
    )


def save_pipeline(pipe: StableDiffusionPipeline, out_dir: str | Path) -> None:
    """Save as safetensors in diffusers format; remove any stale .bin file."""
    out = Path(out_dir)
    pipe.save_pretrained(out, safe_serialization=True)
    for stale in out.rglob("*.bin"):
        stale.unlink()
    size = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    logger.info("saved pipeline to %s (%.2f MB)", out, size / 1e6)


def count_params(module: torch.nn.Module) -> int:
    """Number of parameters of a module."""
    return sum(p.numel() for p in module.parameters())
