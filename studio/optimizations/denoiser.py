"""The pipeline's denoiser, whichever it is: a UNet (`pipe.unet`: SD 1.x, SDXL) or a transformer
(`pipe.transformer`: SD3, Flux). Techniques reach it through here, so one implementation serves both, and the
families say which kind a model has (the registry's `family:` requirements name them)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch

from studio.optimizations.per_shape import PerShapeModule

UNET_FAMILIES = ("sd", "sdxl")
TRANSFORMER_FAMILIES = ("sd3", "flux")
NAMES = ("unet", "transformer")


def denoiser_name(pipe: Any) -> str:
    """'unet' or 'transformer': the attribute the pipeline's denoiser is under."""
    for name in NAMES:
        if getattr(pipe, name, None) is not None:
            return name
    raise ValueError(f"{type(pipe).__name__} has neither a unet nor a transformer to optimize")


def denoiser(pipe: Any) -> torch.nn.Module:
    """The pipeline's UNet or transformer."""
    return getattr(pipe, denoiser_name(pipe))


def kind(families: Iterable[str]) -> str:
    """What the denoisers of these families are, in a word: 'UNets', 'transformers' or 'pipelines'."""
    families = set(families)
    if families <= set(UNET_FAMILIES):
        return "UNets"
    return "transformers" if families <= set(TRANSFORMER_FAMILIES) else "pipelines"


def swap_denoiser(make: Callable[[torch.nn.Module, Any], torch.nn.Module]) -> Callable[[Any, Any], None]:
    """An apply that swaps the denoiser for `make(denoiser, ctx)`, keeping the original for
    `restore_denoiser`. A stand-in that builds a graph per input shape gets the graphs an earlier apply of the
    same configuration built (`PerShapeModule.keep_graphs`)."""

    def apply(pipe: Any, ctx: Any) -> None:
        name = denoiser_name(pipe)
        original = getattr(pipe, name)
        ctx.state["denoiser_original"] = (name, original)
        replacement = make(original, ctx)
        if isinstance(replacement, PerShapeModule):
            replacement.keep_graphs(ctx, name)
        setattr(pipe, name, replacement)

    return apply


def restore_denoiser(pipe: Any, ctx: Any) -> None:
    """Put back the denoiser that `swap_denoiser` replaced."""
    saved = ctx.state.pop("denoiser_original", None)
    if saved is not None:
        setattr(pipe, *saved)
