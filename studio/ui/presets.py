"""Compare's ready-made configurations: those whose every technique can run on the chosen model here (UNet
techniques for SD/SDXL, step caches for transformer models, …); the rest are not offered."""

from __future__ import annotations

import gradio as gr

from studio.optimizations import REGISTRY, availability
from studio.ui.handlers.common import family_of

# Each technique declares the presets that show it off (`Optimization.presets`), each with its place here.
PRESETS = tuple(
    p.label for p in sorted((p for opt in REGISTRY.values() for p in opt.presets), key=lambda p: p.position)
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
