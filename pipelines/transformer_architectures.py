"""Transformer pipelines built from config with random weights: SD3-medium and Flux.1-dev, and tiny variants.

For speed and memory measurement only: the images are noise. `sd3` and `flux` have the real shapes
(SD3Transformer2DModel / FluxTransformer2DModel, the 16-channel AutoencoderKL, CLIP-L, OpenCLIP bigG for SD3
and T5-XXL); `sd3-tiny` and `flux-tiny` are the same classes with a few layers and small widths, for tests and
CPU benchmarks (a call takes seconds at 64x64 on two cores). The bundled tiny-shapes tokenizer stands in for
CLIP's, and a T5 tokenizer made from its vocabulary stands in for T5's (T5 pads every prompt to its full
length, so the shapes are the real ones).

The weights are created directly in the requested dtype (default dtype switched while the modules are built),
so building needs the weights' bytes once, not an fp32 copy first: `pipelines.shapes.check_memory` refuses a
model whose weights would not fit before anything is built.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

import torch
from diffusers import (
    AutoencoderKL,
    FlowMatchEulerDiscreteScheduler,
    FluxPipeline,
    FluxTransformer2DModel,
    SD3Transformer2DModel,
    StableDiffusion3Pipeline,
)
from transformers import (
    CLIPTextConfig,
    CLIPTextModel,
    CLIPTextModelWithProjection,
    CLIPTokenizer,
    T5Config,
    T5EncoderModel,
    T5Tokenizer,
)

from pipelines.architecture_configs import CLIP_G, CLIP_L, VAE, clip_tokenizer
from pipelines.random_weights import init_models

log = logging.getLogger(__name__)

SD3_TRANSFORMER = {  # stabilityai/stable-diffusion-3-medium-diffusers, transformer/config.json
    "sample_size": 128,
    "patch_size": 2,
    "in_channels": 16,
    "out_channels": 16,
    "num_layers": 24,
    "attention_head_dim": 64,
    "num_attention_heads": 24,
    "joint_attention_dim": 4096,
    "caption_projection_dim": 1536,
    "pooled_projection_dim": 2048,
    "pos_embed_max_size": 192,
}
FLUX_TRANSFORMER = {  # black-forest-labs/FLUX.1-dev, transformer/config.json
    "patch_size": 1,
    "in_channels": 64,
    "num_layers": 19,
    "num_single_layers": 38,
    "attention_head_dim": 128,
    "num_attention_heads": 24,
    "joint_attention_dim": 4096,
    "pooled_projection_dim": 768,
    "guidance_embeds": True,
    "axes_dims_rope": (16, 56, 56),
}
VAE16 = {  # the 16-latent-channel AutoencoderKL of SD3 and Flux: SD's, without quant convs
    **VAE,
    "latent_channels": 16,
    "use_quant_conv": False,
    "use_post_quant_conv": False,
    "sample_size": 1024,
}
LATENT_STATS = {"sd3": (1.5305, 0.0609), "flux": (0.3611, 0.1159)}  # scaling_factor, shift_factor
T5_XXL = {  # google/t5-v1_1-xxl's encoder, as SD3 and Flux use it
    "vocab_size": 32128,
    "d_model": 4096,
    "d_ff": 10240,
    "d_kv": 64,
    "num_heads": 64,
    "num_layers": 24,
    "feed_forward_proj": "gated-gelu",
    "relative_attention_num_buckets": 32,
    "relative_attention_max_distance": 128,
}
CLIP_L_PROJECTED = {**CLIP_L, "projection_dim": 768}

# The tiny variants: the same classes, two or three layers of each kind, widths of 32-64.
TINY_CLIP = {
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "max_position_embeddings": 77,
    "projection_dim": 32,
    "hidden_act": "gelu",
    "bos_token_id": 0,  # the stand-in tokenizer's
    "eos_token_id": 1,
    "pad_token_id": 1,
}
TINY_T5 = {
    "d_model": 64,
    "d_ff": 128,
    "d_kv": 16,
    "num_heads": 4,
    "num_layers": 2,
    "feed_forward_proj": "gated-gelu",
    "relative_attention_num_buckets": 8,
}
TINY_VAE = {
    **VAE16,
    "layers_per_block": 1,
    "block_out_channels": (32, 32, 64, 64),
    "sample_size": 64,
}
TINY_SD3 = {
    "sample_size": 32,
    "patch_size": 2,
    "in_channels": 16,
    "out_channels": 16,
    "num_layers": 4,
    "attention_head_dim": 32,
    "num_attention_heads": 4,
    "joint_attention_dim": 64,
    "caption_projection_dim": 128,
    "pooled_projection_dim": 64,
    "pos_embed_max_size": 32,
}
TINY_FLUX = {
    "patch_size": 1,
    "in_channels": 64,
    "num_layers": 2,
    "num_single_layers": 4,
    "attention_head_dim": 32,
    "num_attention_heads": 4,
    "joint_attention_dim": 64,
    "pooled_projection_dim": 32,
    "guidance_embeds": True,
    "axes_dims_rope": (8, 12, 12),
}
NAMES = ("sd3", "flux", "sd3-tiny", "flux-tiny")
TINY_VOCAB = 256  # the tiny text encoders' vocabulary: room for both stand-in tokenizers
T5_LENGTH = {"sd3": 256, "flux": 512}  # the pipelines' default max_sequence_length (the tiny ones: 32)
SPECIAL = ("<pad>", "</s>", "<unk>")


def _clip(config: dict, projected: bool, vocab: int) -> torch.nn.Module:
    cls = CLIPTextModelWithProjection if projected else CLIPTextModel
    return cls(CLIPTextConfig(**{**config, "vocab_size": vocab}))


def _t5(config: dict, vocab: int) -> T5EncoderModel:
    return T5EncoderModel(T5Config(**{**config, "vocab_size": vocab}, is_encoder_decoder=False))


def _vae(config: dict, family: str) -> AutoencoderKL:
    scaling, shift = LATENT_STATS[family]
    return AutoencoderKL(**config, scaling_factor=scaling, shift_factor=shift)


def models(name: str) -> dict[str, torch.nn.Module]:
    """The named architecture's models with random weights (under `torch.device("meta")` nothing is allocated:
    `pipelines.shapes` counts their parameters so). The real ones keep CLIP's and T5's vocabularies, the tiny
    ones have room for the stand-in tokenizers only."""
    family, tiny = name.removesuffix("-tiny"), name.endswith("-tiny")
    clip_l, clip_g = (TINY_CLIP, TINY_CLIP) if tiny else (CLIP_L_PROJECTED, CLIP_G)
    t5 = _t5(TINY_T5 if tiny else T5_XXL, TINY_VOCAB if tiny else T5_XXL["vocab_size"])
    clip_vocab = TINY_VOCAB if tiny else CLIP_L["vocab_size"]
    vae = _vae(TINY_VAE if tiny else VAE16, family)
    if family == "sd3":
        return {
            "vae": vae,
            "text_encoder": _clip(clip_l, True, clip_vocab),
            "text_encoder_2": _clip(clip_g, True, clip_vocab),
            "text_encoder_3": t5,
            "transformer": SD3Transformer2DModel(**(TINY_SD3 if tiny else SD3_TRANSFORMER)),
        }
    return {
        "vae": vae,
        "text_encoder": _clip(clip_l, False, clip_vocab),
        "text_encoder_2": t5,
        "transformer": FluxTransformer2DModel(**(TINY_FLUX if tiny else FLUX_TRANSFORMER)),
    }


def t5_tokenizer(clip: CLIPTokenizer, length: int) -> T5Tokenizer:
    """A T5 (Unigram) tokenizer over the CLIP stand-in's words and letters, padding to `length` tokens."""
    words = [w.removesuffix("</w>") for w in clip.get_vocab() if w.isascii() and not w.startswith("<|")]
    pieces = dict.fromkeys(["▁", *(f"▁{w}" for w in words if w), *"abcdefghijklmnopqrstuvwxyz"])
    vocab = [(s, 0.0) for s in SPECIAL] + [(p, -float(len(p) == 1) - 1.0) for p in pieces]
    tokenizer = T5Tokenizer(vocab=vocab, extra_ids=0)
    tokenizer.model_max_length = length
    return tokenizer


@contextlib.contextmanager
def default_dtype(dtype: torch.dtype) -> Iterator[None]:
    """Create floating-point parameters in `dtype` for the block."""
    before = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(before)


def _scheduler(family: str) -> FlowMatchEulerDiscreteScheduler:
    if family == "sd3":
        return FlowMatchEulerDiscreteScheduler(num_train_timesteps=1000, shift=3.0)
    return FlowMatchEulerDiscreteScheduler(
        num_train_timesteps=1000,
        shift=3.0,
        use_dynamic_shifting=True,
        base_shift=0.5,
        max_shift=1.15,
        base_image_seq_len=256,
        max_image_seq_len=4096,
    )


def build(name: str, tokenizer_source: str, dtype: torch.dtype = torch.float32) -> Any:
    """A pipeline of the named architecture with seeded random weights in `dtype`, on the CPU."""
    family, tiny = name.removesuffix("-tiny"), name.endswith("-tiny")
    clip = clip_tokenizer(tokenizer_source, None if tiny else CLIP_L["max_position_embeddings"])
    t5 = t5_tokenizer(clip, 32 if tiny else T5_LENGTH[family])
    if tiny and max(len(clip), len(t5)) > TINY_VOCAB:
        raise ValueError(f"the stand-in tokenizers have more than {TINY_VOCAB} tokens")
    torch.manual_seed(0)
    with default_dtype(dtype):
        parts = init_models(lambda: models(name), dtype)
    for part in parts.values():
        part.eval()  # built from config, the models are in training mode: T5's dropout would be on
    if family == "sd3":
        texts = {"tokenizer": clip, "tokenizer_2": clip, "tokenizer_3": t5}
        pipe = StableDiffusion3Pipeline(**parts, **texts, scheduler=_scheduler(family))
    else:
        pipe = FluxPipeline(**parts, tokenizer=clip, tokenizer_2=t5, scheduler=_scheduler(family))
    # Buffers made in fp32 on purpose (SD3's position table) follow the weights, with nn.Module's own `to`
    # (diffusers' warns about modules to keep in fp32, of which these models have none).
    for part in parts.values():
        torch.nn.Module.to(part, dtype=dtype)
    return pipe
