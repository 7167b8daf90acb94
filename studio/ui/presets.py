"""Compare's ready-made configurations: those whose every technique can run on the chosen model here (UNet
techniques for SD/SDXL, step caches for transformer models, …); the rest are not offered."""

from __future__ import annotations

import gradio as gr

from studio.optimizations import availability
from studio.ui.handlers.common import family_of

PRESETS = (
    "bf16",
    "channels_last",
    "bf16,channels_last",
    "classic_attention",
    "attention_slicing",
    "autocast",
    "jit_trace_unet",
    "bf16,channels_last,jit_trace_unet",
    "first_block_cache",
    "bf16,first_block_cache",
    "fused_qkv",
    "layerwise_casting",
    "vae_slicing",
    "vae_tiling",
    "torch_compile",
)


def presets_for(family: str | None, device: str = "auto") -> list[str]:
    """The presets that can run on a model of this family (None: not known yet) on this machine."""
    available = {t["name"] for t in availability(device, family=family) if t["unavailable"] is None}
    return [p for p in PRESETS if set(p.split(",")) <= available]


def presets_for_model(model: str, custom: str, ticked: list[str] | None) -> dict:
    """Compare's configuration boxes for the model now chosen: what can run on it, with the ticks that still
    can kept."""
    presets = presets_for(family_of(model, custom))
    return gr.update(choices=presets, value=[p for p in ticked or [] if p in presets])
