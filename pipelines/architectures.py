"""Real SD 1.5 and SDXL architectures built from config with random weights (SD3 and Flux, and tiny variants
of them: `pipelines.transformer_architectures`).

For speed and memory measurement only: the images are noise. They let the studio
measure techniques on the real shapes (UNet, VAE, text encoders) on any machine,
with no download. The bundled tiny-shapes tokenizer stands in for CLIP's, padding to CLIP's 77 tokens as the
real models do (its own length is 24: cross-attention over 24 tokens would cost less than on the real model).
"""

from __future__ import annotations

import logging
from typing import Any

import torch
from diffusers import (
    AutoencoderKL,
    EulerDiscreteScheduler,
    PNDMScheduler,
    StableDiffusionPipeline,
    StableDiffusionXLPipeline,
    UNet2DConditionModel,
)
from transformers import CLIPTextConfig, CLIPTextModel, CLIPTextModelWithProjection

from pipelines import transformer_architectures
from pipelines.architecture_configs import BETAS, CLIP_G, CLIP_L, SD15_UNET, SDXL_UNET, VAE, clip_tokenizer
from pipelines.random_weights import init_models

log = logging.getLogger(__name__)


def models(name: str) -> dict[str, torch.nn.Module]:
    """The architecture's models with random weights, in the order the seeded builders create them (under
    `torch.device("meta")` nothing is allocated: `pipelines.shapes` counts their parameters so)."""
    if name not in BUILDERS:  # the transformer ones
        return transformer_architectures.models(name)
    if name == "sd15":
        return {
            "vae": AutoencoderKL(**VAE, sample_size=512, scaling_factor=0.18215),
            "text_encoder": CLIPTextModel(CLIPTextConfig(**CLIP_L)),
            "unet": UNet2DConditionModel(**SD15_UNET),
        }
    return {
        "vae": AutoencoderKL(**VAE, sample_size=1024, scaling_factor=0.13025),
        "text_encoder": CLIPTextModel(CLIPTextConfig(**CLIP_L)),
        "text_encoder_2": CLIPTextModelWithProjection(CLIPTextConfig(**CLIP_G)),
        "unet": UNet2DConditionModel(**SDXL_UNET),
    }


def scheduler(name: str) -> Any:
    """The scheduler the named (UNet) architecture's pipeline is built with, as its released model's is."""
    if name == "sd15":
        return PNDMScheduler(**BETAS, skip_prk_steps=True, steps_offset=1)
    if name == "sdxl":
        return EulerDiscreteScheduler(**BETAS, timestep_spacing="leading", steps_offset=1)
    raise ValueError(f"{name!r} is not a UNet architecture ({', '.join(BUILDERS)})")


def build_sd15(tokenizer_source: str, dtype: torch.dtype) -> StableDiffusionPipeline:
    torch.manual_seed(0)
    pipe = StableDiffusionPipeline(
        **init_models(lambda: models("sd15"), torch.float32),
        tokenizer=clip_tokenizer(tokenizer_source),
        scheduler=scheduler("sd15"),
        safety_checker=None,
        feature_extractor=None,
        requires_safety_checker=False,
    )
    return pipe.to(dtype=dtype)


def build_sdxl(tokenizer_source: str, dtype: torch.dtype) -> StableDiffusionXLPipeline:
    torch.manual_seed(0)
    pipe = StableDiffusionXLPipeline(
        **init_models(lambda: models("sdxl"), torch.float32),
        tokenizer=clip_tokenizer(tokenizer_source),
        tokenizer_2=clip_tokenizer(tokenizer_source),
        scheduler=scheduler("sdxl"),
    )
    return pipe.to(dtype=dtype)


BUILDERS: dict[str, Any] = {"sd15": build_sd15, "sdxl": build_sdxl}


def build(name: str, tokenizer_source: str, dtype: torch.dtype = torch.float32) -> Any:
    """A pipeline of the named architecture with seeded random weights, on the CPU."""
    log.info("building the %s architecture with random weights (%s)", name, dtype)
    if name not in BUILDERS:
        return transformer_architectures.build(name, tokenizer_source, dtype)
    return BUILDERS[name](tokenizer_source, dtype)
