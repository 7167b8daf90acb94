"""Fewer steps, cheaper decodes and LoRAs at full speed: the techniques of the step lever.

- `few_step`: the model's distilled adapter (`pipelines.distilled.FEW_STEP`) with the scheduler, step count,
  guidance and LoRA scale it was trained for. The request boundary rewrites the request for it (its steps,
  guidance and scheduler, and the adapter among its LoRAs: `studio.request.generation.with_few_step`), so the
  run's record states what actually ran; on the pipeline it is the adapter `adapters.switch` loads.
- `tiny_vae`: `AutoencoderTiny` in place of the VAE for the decode (`pipelines.distilled.TINY_VAES`).
- `fuse_lora`: the run's LoRAs folded into the weights (no extra matmuls per adapted layer), and the original
  weights put back exactly afterwards from a copy kept of the adapted layers (not by subtracting, which
  drifts).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from pipelines.distilled import ADAPTER_NAMES, TINY_VAES
from pipelines.registry import resolve
from studio import checks
from studio.errors import ModelLoadError
from studio.optimizations.base import Context, Optimization, Settings, register
from studio.optimizations.facts import DEFAULTS_ONLY, NO_MEMORY_EFFECT

FAMILIES = "family:sd|sdxl|sd3|flux"
COMPONENTS = ("unet", "transformer", "text_encoder", "text_encoder_2", "text_encoder_3")
MAX_FEW_STEPS = 16
# techniques that reuse a denoiser call's work across steps
STEP_CACHES = ("deepcache", "first_block_cache", "pyramid_attention_broadcast", "faster_cache")
STEP_CACHES += ("taylorseer_cache",)
# techniques whose image follows another path (fewer steps, another decoder): the auto-tuner judges them by
# the prompt score, not by the distance of their pixels from the baseline's
JUDGED_BY_PROMPT = frozenset({"few_step", "tiny_vae"})


@dataclass(frozen=True)
class FewStepSettings(Settings):
    """`adapter`: which distilled adapter ("auto": the first registered for the model; lcm, hyper,
    lightning, tcd, turbo); `steps`: the steps to run (0: the adapter's own)."""

    adapter: str = "auto"
    steps: int = 0

    def __post_init__(self) -> None:
        self._set("adapter", checks.one_of("few_step adapter", self.adapter, ("auto", *ADAPTER_NAMES)))
        self._set("steps", checks.whole("few_step steps", self.steps, 0, MAX_FEW_STEPS))


def stacked_cache_warning(optimizations: tuple[str, ...]) -> str | None:
    """A sentence when a step cache rides on few_step: with a handful of steps there is little to reuse
    (x1.04-x1.22 on a distilled 4-step model in cache-dit's own table), and each reuse costs more of the
    image."""
    caches = [name for name in optimizations if name in STEP_CACHES]
    if "few_step" not in optimizations or not caches:
        return None
    return (
        f"{', '.join(caches)} reuses denoiser steps on top of few_step's few: little left to save, and each "
        "reuse changes more of the image; compare few_step alone."
    )


def _lora_layers(pipe: Any) -> Iterator[tuple[str, Any]]:
    """Every layer a LoRA adapts (peft's wrappers), by component and name."""
    from peft.tuners.tuners_utils import BaseTunerLayer

    for component in COMPONENTS:
        module = getattr(pipe, component, None)
        if isinstance(module, torch.nn.Module):
            for name, layer in module.named_modules():
                if isinstance(layer, BaseTunerLayer):
                    yield f"{component}.{name}", layer


def _fuse(pipe: Any, ctx: Context) -> None:
    """Keep a copy of each adapted layer's weights, then fold the active LoRAs (at their scales) into them."""
    if not ctx.adapters:
        ctx.stats["fuse_lora"] = "no LoRA to fuse"
        return
    with torch.no_grad():
        ctx.state["fuse_lora_weights"] = {
            name: [p.detach().clone() for p in layer.get_base_layer().parameters(recurse=False)]
            for name, layer in _lora_layers(pipe)
        }
    pipe.fuse_lora(lora_scale=1.0)
    ctx.stats["fuse_lora"] = f"{len(ctx.state['fuse_lora_weights'])} layers"


def _unfuse(pipe: Any, ctx: Context) -> None:
    """Take the LoRAs out of the weights: unfuse (diffusers' bookkeeping), then the kept weights, exactly."""
    kept = ctx.state.pop("fuse_lora_weights", None)
    if kept is None:
        return
    pipe.unfuse_lora()
    layers = dict(_lora_layers(pipe))
    with torch.no_grad():
        for name, originals in kept.items():
            params = layers[name].get_base_layer().parameters(recurse=False)
            for param, original in zip(params, originals, strict=True):
                param.copy_(original)


def _tiny_vae(pipe: Any, ctx: Context) -> None:
    """Swap in the model's AutoencoderTiny (loaded once per pipeline, kept for the next apply)."""
    from diffusers import AutoencoderTiny

    base = resolve(ctx.model).adapter_base if ctx.model else None
    source = TINY_VAES.get(base or "")
    if source is None:
        raise ModelLoadError(f"tiny_vae has no tiny decoder registered for {ctx.model or 'this model'}.")
    dtype = pipe.vae.dtype
    key = (source, str(dtype), ctx.device)
    tiny = ctx.state.get("tiny_vae_kept")
    if tiny is None or tiny[0] != key:
        try:
            module = AutoencoderTiny.from_pretrained(source, torch_dtype=dtype).to(ctx.device)
        except (OSError, ValueError) as exc:  # not in the cache and offline; a folder that is not one
            raise ModelLoadError(
                f"tiny_vae needs {source}, which could not be loaded ({str(exc).splitlines()[0][:160]}); "
                f"offline, download it first (`hf download {source}`)."
            ) from exc
        tiny = ctx.state["tiny_vae_kept"] = (key, module.eval())
    ctx.state["tiny_vae_original"] = pipe.vae
    pipe.vae = tiny[1]


def _full_vae(pipe: Any, ctx: Context) -> None:
    original = ctx.state.pop("tiny_vae_original", None)
    if original is not None:
        pipe.vae = original


register(
    Optimization(
        name="few_step",
        label="few steps (distilled adapter)",
        group="speed",
        description=(
            "Draw in a few steps with the model's distilled adapter (LCM-LoRA, Hyper-SD, SDXL-Lightning, "
            "TCD, FLUX.1-Turbo-Alpha; the bundled model's own LCM-LoRA) and the scheduler, step count, "
            "guidance and LoRA scale it was trained for; the record states the steps and guidance that ran. "
            "Settings: adapter, steps (0: the adapter's). Judge it by the prompt score: its images follow "
            "another path."
        ),
        requires=(FAMILIES,),
        reasons={"family": "has no distilled adapter registered for this kind of model"},
        order=1,
        autotune="candidate",
        grid=DEFAULTS_ONLY,
        presets=(),
        ladder_rung=None,
        memory_effect=NO_MEMORY_EFFECT,
        settings=FewStepSettings,
    )
)
register(
    Optimization(
        name="tiny_vae",
        label="tiny decoder (TAESD)",
        group="speed",
        description=(
            "Decode with AutoencoderTiny (TAESD, TAESDXL, TAESD3, TAEF1; the bundled model's own) instead of "
            "the VAE: a fraction of the decode's time and memory; the image changes a little."
        ),
        requires=(FAMILIES,),
        reasons={"family": "has no tiny decoder registered for this kind of model"},
        apply=_tiny_vae,
        revert=_full_vae,
        order=2,
        autotune="candidate",
        grid=DEFAULTS_ONLY,
        presets=(),
        ladder_rung=None,
        memory_effect=NO_MEMORY_EFFECT,
    )
)
register(
    Optimization(
        name="fuse_lora",
        label="fuse LoRAs",
        group="speed",
        description=(
            "Fold the run's LoRAs into the weights (diffusers' fuse_lora): no extra matmuls per adapted "
            "layer; the original weights are put back exactly afterwards, from a copy of the adapted layers."
        ),
        apply=_fuse,
        revert=_unfuse,
        order=3,
        autotune="excluded",
        grid=DEFAULTS_ONLY,
        presets=(),
        ladder_rung=None,
        memory_effect=NO_MEMORY_EFFECT,
        weight_copies=0.25,
    )
)
