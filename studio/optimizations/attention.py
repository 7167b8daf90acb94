"""Attention kernels, attention slicing and fused QKV projections, switched with attention processors.

diffusers 0.42's `set_attention_backend` does nothing on UNet pipelines (SD, SDXL), so
the kernel is chosen per attention module with `set_processor`. The processors the
model was loaded with are saved on first change and restored exactly on revert. The kernel
techniques are UNet processors; a transformer's kernel is `attention_backend` (diffusers'
dispatcher, studio.optimizations.attention_backends).

`fused_qkv` is diffusers' `fuse_qkv_projections` done layer by layer so that it goes
through the same processor bookkeeping: `pipe.fuse_qkv_projections()` sets processors
behind this module's back, and `unfuse_qkv_projections()` leaves the fused layers in place.
On transformers it fuses the text stream's added projections too: SD3's joint attention gets
`FusedJointAttnProcessor2_0`, Flux's attention modules read their own `fused_projections` flag.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from diffusers.models.attention import AttentionModuleMixin
from diffusers.models.attention_processor import (
    Attention,
    AttnProcessor,
    AttnProcessor2_0,
    FusedAttnProcessor2_0,
    FusedJointAttnProcessor2_0,
    JointAttnProcessor2_0,
    SlicedAttnProcessor,
    XFormersAttnProcessor,
)

from studio import checks
from studio.optimizations.base import Context, Optimization, Settings, register
from studio.optimizations.facts import DEFAULTS_ONLY, NO_MEMORY_EFFECT, LadderRung, Preset

ATTENTION_MODULES = ("unet", "transformer", "vae")
ATTENTION_CLASSES = (Attention, AttentionModuleMixin)
KERNELS = ("classic_attention", "sdpa", "xformers", "attention_slicing")
FUSED = ("to_qkv", "to_kv", "to_added_qkv")
# A legacy `Attention` layer's processor -> the one that reads its fused projections; modules of the newer
# `AttentionModuleMixin` (Flux) keep theirs, which read the `fused_projections` flag themselves.
FUSED_PROCESSORS = {
    AttnProcessor2_0: FusedAttnProcessor2_0,
    JointAttnProcessor2_0: FusedJointAttnProcessor2_0,
}
KERNEL_REASONS = {"family": "chooses a UNet's attention processors; on a transformer use attention_backend"}


def _attention_layers(pipe: Any) -> list[tuple[str, Attention]]:
    layers = []
    for component in ATTENTION_MODULES:
        module = getattr(pipe, component, None)
        if not isinstance(module, torch.nn.Module):
            continue
        named = module.named_modules()
        layers += [(f"{component}.{n}", m) for n, m in named if isinstance(m, ATTENTION_CLASSES)]
    return layers


@dataclass(frozen=True)
class AttentionSlicingSettings(Settings):
    """`slice_size`: heads per slice: "auto" (half of them), "max" (one) or a number."""

    slice_size: Any = "auto"

    def __post_init__(self) -> None:
        if self.slice_size not in ("auto", "max"):
            self._set("slice_size", checks.whole("attention_slicing slice_size", self.slice_size, 1, 1024))


def _slice_size(layer: Attention, setting: Any) -> int:
    if setting == "max":
        return 1
    if setting in (None, "auto"):
        return max(1, layer.heads // 2)
    return int(setting)


def _fusable(layer: Attention, original: Any) -> bool:
    """Whether fused_qkv fuses this layer: a Flux-style module that supports it, or a legacy layer whose
    processor has a fused counterpart (a UNet layer with added K/V projections has none)."""
    if not isinstance(layer, Attention):
        return getattr(layer, "_supports_qkv_fusion", False)
    if type(original) is AttnProcessor2_0 and getattr(layer, "add_k_proj", None) is not None:
        return False
    return type(original) in FUSED_PROCESSORS


def _processor_for(layer: Attention, original: Any, ctx: Context) -> Any | None:
    target = ctx.target
    if "fused_qkv" in target and layer.fused_projections:
        fused = FUSED_PROCESSORS.get(type(original)) if isinstance(layer, Attention) else None
        return fused() if fused is not None else None
    if "attention_slicing" in target:
        return SlicedAttnProcessor(_slice_size(layer, ctx.settings("attention_slicing").slice_size))
    if "xformers" in target:
        return XFormersAttnProcessor()
    if "classic_attention" in target:
        return AttnProcessor()
    if "sdpa" in target:
        return AttnProcessor2_0()
    return None


def _layers(pipe: Any, ctx: Context) -> list[tuple[str, Attention]]:
    if (
        "attention_layers" not in ctx.state
    ):  # found once per pipeline: walking every module costs more than switching
        ctx.state["attention_layers"] = _attention_layers(pipe)
    return ctx.state["attention_layers"]


def set_attention(pipe: Any, ctx: Context) -> None:
    """Give every attention layer the processor the target configuration asks for.

    With no attention technique in the target, the original processors come back.
    """
    originals = ctx.state.setdefault("attention_originals", {})
    for name, layer in _layers(pipe, ctx):
        originals.setdefault(name, layer.processor)
        wanted = _processor_for(layer, originals[name], ctx)
        layer.set_processor(wanted if wanted is not None else originals[name])


def fuse_qkv(pipe: Any, ctx: Context) -> None:
    """Concatenate each attention layer's Q/K/V (self-attention) or K/V (cross-attention) projections into one
    Linear and switch to `FusedAttnProcessor2_0`; the separate projections stay for an exact revert."""
    from studio.optimizations.quantization import (
        float_weights,
    )  # here: the registry lists int8_dynamic after these

    originals = ctx.state.setdefault("attention_originals", {})
    with float_weights(pipe, ctx):
        for name, layer in _layers(pipe, ctx):
            if not layer.fused_projections and _fusable(layer, originals.get(name, layer.processor)):
                layer.fuse_projections()
    set_attention(pipe, ctx)


def unfuse_qkv(pipe: Any, ctx: Context) -> None:
    """Processors back to what the rest of the configuration asks for, fused projection layers deleted."""
    from studio.optimizations.quantization import float_weights

    set_attention(pipe, ctx)
    with float_weights(pipe, ctx):
        for _, layer in _layers(pipe, ctx):
            for attr in FUSED:
                if attr in layer._modules:
                    delattr(layer, attr)
            layer.fused_projections = False


def _attention(name: str, label: str, group: str, description: str, **kw: Any) -> Optimization:
    return register(
        Optimization(
            name=name,
            label=label,
            group=group,
            description=description,
            requires=(*kw.pop("requires", ()), "family:sd|sdxl"),
            reasons=KERNEL_REASONS,
            conflict_reason=(
                "each one sets the UNet's attention processors, and one of them is in place at a time"
            ),
            conflicts=tuple(k for k in KERNELS if k != name),
            apply=set_attention,
            revert=set_attention,
            order=20,
            **kw,
        )
    )


_attention(
    "classic_attention",
    "classic attention",
    "speed",
    "Plain softmax(QK^T)V attention with the full score matrix (the diffusers documentation's 'original').",
    autotune="excluded",  # the documentation's slow "original": the ladder's first rung, never faster
    grid=DEFAULTS_ONLY,
    presets=(Preset(40, ("classic_attention",)),),
    ladder_rung=LadderRung(10, "original"),
    memory_effect=NO_MEMORY_EFFECT,
)
_attention(
    "sdpa",
    "SDPA attention",
    "speed",
    "torch.nn.functional.scaled_dot_product_attention: fused, memory-efficient kernels (flash / efficient / "
    "math).",
    autotune="candidate",
    grid=DEFAULTS_ONLY,
    presets=(),
    ladder_rung=None,  # the fallback of xformers' rung
    memory_effect=NO_MEMORY_EFFECT,
)
_attention(
    "xformers",
    "xFormers attention",
    "speed",
    "xFormers memory-efficient attention kernels.",
    requires=("cuda", "module:xformers"),
    autotune="candidate",
    grid=DEFAULTS_ONLY,
    presets=(),
    ladder_rung=LadderRung(
        70, "memory-efficient attention", fallback=("sdpa",), remove=("classic_attention",)
    ),
    memory_effect=NO_MEMORY_EFFECT,
)
_attention(
    "attention_slicing",
    "attention slicing",
    "memory",
    "Compute attention a few heads at a time: lower peak memory, some latency cost.",
    settings=AttentionSlicingSettings,
    autotune="excluded",  # trades speed for memory by design
    grid=DEFAULTS_ONLY,
    presets=(Preset(50, ("attention_slicing",)),),
    ladder_rung=None,
    # none in the estimate: against SDPA, diffusers' default, it costs memory (docs/benchmarks.md)
    memory_effect=NO_MEMORY_EFFECT,
)
register(
    Optimization(
        name="fused_qkv",
        label="fused QKV projections",
        group="speed",
        description=(
            "Fuse each attention layer's query/key/value projections (and a transformer's text-stream ones) "
            "into one matmul (diffusers' fuse_qkv_projections)."
        ),
        conflict_reason=(
            "it fuses the attention's query, key and value projections for the processors that take them "
            "fused (SDPA's), which the classic, xFormers and sliced processors do not"
        ),
        conflicts=("classic_attention", "xformers", "attention_slicing"),
        apply=fuse_qkv,
        revert=unfuse_qkv,
        order=25,
        autotune="candidate",
        grid=DEFAULTS_ONLY,
        presets=(Preset(110, ("fused_qkv",)),),
        ladder_rung=None,
        memory_effect=NO_MEMORY_EFFECT,
    )
)
