"""Attention kernels, attention slicing and fused QKV projections, switched with attention processors.

diffusers 0.42's `set_attention_backend` does nothing on UNet pipelines (SD, SDXL), so
the kernel is chosen per attention module with `set_processor`. The processors the
model was loaded with are saved on first change and restored exactly on revert.

`fused_qkv` is diffusers' `fuse_qkv_projections` done layer by layer so that it goes
through the same processor bookkeeping: `pipe.fuse_qkv_projections()` sets processors
behind this module's back, and `unfuse_qkv_projections()` leaves the fused layers in place.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from diffusers.models.attention_processor import (
    Attention,
    AttnProcessor,
    AttnProcessor2_0,
    FusedAttnProcessor2_0,
    SlicedAttnProcessor,
    XFormersAttnProcessor,
)

from studio import checks
from studio.optimizations.base import Context, Optimization, Settings, register

ATTENTION_MODULES = ("unet", "vae")
KERNELS = ("classic_attention", "sdpa", "xformers", "attention_slicing")
FUSED = ("to_qkv", "to_kv", "to_added_qkv")


def _attention_layers(pipe: Any) -> list[tuple[str, Attention]]:
    layers = []
    for component in ATTENTION_MODULES:
        module = getattr(pipe, component, None)
        if module is None:
            continue
        layers += [(f"{component}.{n}", m) for n, m in module.named_modules() if isinstance(m, Attention)]
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


def _processor_for(layer: Attention, ctx: Context) -> Any | None:
    target = ctx.target
    if "fused_qkv" in target and layer.fused_projections:
        return FusedAttnProcessor2_0()
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
        wanted = _processor_for(layer, ctx)
        layer.set_processor(wanted if wanted is not None else originals[name])


def fuse_qkv(pipe: Any, ctx: Context) -> None:
    """Concatenate each attention layer's Q/K/V (self-attention) or K/V (cross-attention) projections into one
    Linear and switch to `FusedAttnProcessor2_0`; the separate projections stay for an exact revert."""
    from studio.optimizations.quantization import (
        float_weights,
    )  # here: the registry lists int8_dynamic after these

    with float_weights(pipe, ctx):
        for _, layer in _layers(pipe, ctx):
            if not layer.fused_projections and getattr(layer, "add_k_proj", None) is None:
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
)
_attention(
    "sdpa",
    "SDPA attention",
    "speed",
    "torch.nn.functional.scaled_dot_product_attention: fused, memory-efficient kernels (flash / efficient / "
    "math).",
)
_attention(
    "xformers",
    "xFormers attention",
    "speed",
    "xFormers memory-efficient attention kernels.",
    requires=("cuda", "module:xformers"),
)
_attention(
    "attention_slicing",
    "attention slicing",
    "memory",
    "Compute attention a few heads at a time: lower peak memory, some latency cost.",
    settings=AttentionSlicingSettings,
)
register(
    Optimization(
        name="fused_qkv",
        label="fused QKV projections",
        group="speed",
        description=(
            "Fuse each attention layer's query/key/value projections into one matmul (diffusers' "
            "fuse_qkv_projections) and run them with SDPA."
        ),
        conflicts=("classic_attention", "xformers", "attention_slicing"),
        apply=fuse_qkv,
        revert=unfuse_qkv,
        order=25,
    )
)
