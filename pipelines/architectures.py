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
from transformers import CLIPTextConfig, CLIPTextModel, CLIPTextModelWithProjection, CLIPTokenizer

log = logging.getLogger(__name__)

SD15_UNET = {
    "sample_size": 64,
    "in_channels": 4,
    "out_channels": 4,
    "layers_per_block": 2,
    "block_out_channels": (320, 640, 1280, 1280),
    "down_block_types": (
        "CrossAttnDownBlock2D",
        "CrossAttnDownBlock2D",
        "CrossAttnDownBlock2D",
        "DownBlock2D",
    ),
    "up_block_types": ("UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D"),
    "cross_attention_dim": 768,
    "attention_head_dim": 8,
    "norm_num_groups": 32,
}
SDXL_UNET = {
    "sample_size": 128,
    "in_channels": 4,
    "out_channels": 4,
    "layers_per_block": 2,
    "block_out_channels": (320, 640, 1280),
    "down_block_types": ("DownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D"),
    "up_block_types": ("CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "UpBlock2D"),
    "transformer_layers_per_block": (1, 2, 10),
    "attention_head_dim": (5, 10, 20),
    "cross_attention_dim": 2048,
    "use_linear_projection": True,
    "addition_embed_type": "text_time",
    "addition_time_embed_dim": 256,
    "projection_class_embeddings_input_dim": 2816,
}
VAE = {
    "in_channels": 3,
    "out_channels": 3,
    "latent_channels": 4,
    "layers_per_block": 2,
    "block_out_channels": (128, 256, 512, 512),
    "down_block_types": ("DownEncoderBlock2D",) * 4,
    "up_block_types": ("UpDecoderBlock2D",) * 4,
}
CLIP_L = {
    "vocab_size": 49408,
    "hidden_size": 768,
    "intermediate_size": 3072,
    "num_hidden_layers": 12,
    "num_attention_heads": 12,
    "max_position_embeddings": 77,
    "hidden_act": "quick_gelu",
}
CLIP_G = {
    "vocab_size": 49408,
    "hidden_size": 1280,
    "intermediate_size": 5120,
    "num_hidden_layers": 32,
    "num_attention_heads": 20,
    "max_position_embeddings": 77,
    "hidden_act": "gelu",
    "projection_dim": 1280,
}
BETAS = {
    "beta_start": 0.00085,
    "beta_end": 0.012,
    "beta_schedule": "scaled_linear",
    "num_train_timesteps": 1000,
}


def clip_tokenizer(source: str, length: int | None = CLIP_L["max_position_embeddings"]) -> CLIPTokenizer:
    """The bundled CLIP tokenizer from `source`, padding and truncating to `length` tokens (None: its own)."""
    kwargs = {} if length is None else {"model_max_length": length}
    return CLIPTokenizer.from_pretrained(source, subfolder="tokenizer", **kwargs)


def models(name: str) -> dict[str, torch.nn.Module]:
    """The architecture's models with random weights, in the order the seeded builders create them (under
    `torch.device("meta")` nothing is allocated: `pipelines.shapes` counts their parameters so)."""
    if name not in BUILDERS:  # the transformer ones (they import this module's CLIP configs)
        from pipelines import transformer_architectures

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


def init_device(name: str, dtype: torch.dtype) -> str:
    """Where `init_models` draws the weights: "cuda" when its free memory holds them with a quarter to spare,
    else "cpu"."""
    if not torch.cuda.is_available():
        return "cpu"
    from pipelines.shapes import arch_shape  # it counts this module's models

    needed = sum(arch_shape(name).params.values()) * torch.empty((), dtype=dtype).element_size()
    return "cuda" if torch.cuda.mem_get_info()[0] > 1.25 * needed else "cpu"


def init_models(name: str, dtype: torch.dtype) -> dict[str, torch.nn.Module]:
    """`models(name)` with their random weights drawn on a CUDA device when one has room for them, then moved
    to the CPU, where the loader returns pipelines: drawing them takes seconds there, against over 6 minutes
    for Flux.1-dev's 17 billion parameters on a 16-core CPU. Seeded either way; a CUDA device draws other
    numbers than the CPU (the images are noise either way)."""
    where = init_device(name, dtype)
    with torch.device(where):
        parts = models(name)
    if where != "cpu":
        for part in parts.values():
            part.to("cpu")
        torch.cuda.empty_cache()
        log.info("drew the %s architecture's random weights on %s", name, torch.cuda.get_device_name())
    return parts


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
        **init_models("sd15", torch.float32),
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
        **init_models("sdxl", torch.float32),
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
        from pipelines import transformer_architectures

        return transformer_architectures.build(name, tokenizer_source, dtype)
    return BUILDERS[name](tokenizer_source, dtype)
