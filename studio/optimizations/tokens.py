"""Token merging (ToMe for Stable Diffusion, Bolya & Hoffman 2023) through the `tomesd` package.

Before self-attention, similar image tokens are merged (`ratio` of them) and unmerged
after it, so attention runs on fewer tokens. tomesd 0.1.3 swaps the class of every
`BasicTransformerBlock` for a subclass whose `forward` is a copy of an older diffusers
one. Checked against diffusers 0.42.1: for SD and SDXL UNet blocks (layer norm, no
positional embedding, no GLIGEN, no feed-forward chunking) it computes the same thing,
and ratio 0 gives bit-identical images. Two things are added around it here:

- tomesd draws its random token partition from a generator forked from the global RNG
  on first use and never reseeds it, so two runs of one request would differ. A UNet
  pre-hook reseeds it from each call's timestep: random across steps, reproducible
  across runs.
- `tomesd.remove_patch` restores the classes but leaves `_tome_info` behind on the UNet
  and every block (and `use_ada_layer_norm*` on diffusers versions without them);
  revert deletes every instance attribute that apply added.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

import torch

from studio import checks
from studio.errors import UnavailableError
from studio.optimizations.base import Context, Optimization, Settings, register
from studio.optimizations.facts import NO_MEMORY_EFFECT

MAX_RATIO = 0.75  # tomesd merges at most 1 - 1/(sx*sy) of the tokens with its 2x2 strides
DOWNSAMPLES = (1, 2, 4, 8)


@dataclass(frozen=True)
class TokenMergingSettings(Settings):
    """`ratio`: share of tokens merged; `max_downsample`: the deepest UNet level (1, 2, 4, 8) that merges."""

    ratio: float = 0.5
    max_downsample: int = 1

    def __post_init__(self) -> None:
        self._set("ratio", checks.number("token_merging ratio", self.ratio, 0.0, MAX_RATIO))
        self._set(
            "max_downsample", checks.one_of("token_merging max_downsample", self.max_downsample, DOWNSAMPLES)
        )


def _tomesd() -> Any:
    try:
        return importlib.import_module("tomesd")
    except ImportError as exc:
        raise UnavailableError(
            f"token_merging could not import tomesd ({exc}); pip install -r requirements-extras.txt."
        ) from exc


def _patched_modules(unet: torch.nn.Module) -> list[torch.nn.Module]:
    blocks = [
        m for m in unet.modules() if any(c.__name__ == "BasicTransformerBlock" for c in type(m).__mro__)
    ]
    return [unet, *blocks]


def _reseed(module: torch.nn.Module, args: tuple, kwargs: dict) -> None:
    info = getattr(module, "_tome_info", None)
    if info is None:
        return
    sample = args[0] if args else kwargs["sample"]
    timestep = args[1] if len(args) > 1 else kwargs["timestep"]
    seed = int(torch.as_tensor(timestep).flatten()[0].item())
    device = sample.device if sample.device.type in ("cpu", "cuda") else torch.device("cpu")
    info["args"]["generator"] = torch.Generator(device=device).manual_seed(seed)


def enable_token_merging(pipe: Any, ctx: Context) -> None:
    """Patch `pipe.unet` with tomesd.

    Args:
        pipe: a pipeline whose `unet` has diffusers `BasicTransformerBlock`s.
        ctx: the request; its `TokenMergingSettings` say `ratio` and `max_downsample`.
    """
    tomesd = _tomesd()
    settings = ctx.settings("token_merging")
    unet = pipe.unet
    before = {id(m): set(vars(m)) for m in _patched_modules(unet)}
    tomesd.apply_patch(unet, ratio=settings.ratio, max_downsample=settings.max_downsample)
    handle = unet.register_forward_pre_hook(_reseed, with_kwargs=True)
    ctx.state["token_merging"] = (unet, before, handle)


def disable_token_merging(pipe: Any, ctx: Context) -> None:
    """Undo the patch: original classes, no hooks, no leftover attributes."""
    saved = ctx.state.pop("token_merging", None)
    if saved is None:
        return
    unet, before, handle = saved
    handle.remove()
    _tomesd().remove_patch(unet)
    for module in _patched_modules(unet):
        for attr in set(vars(module)) - before.get(id(module), set(vars(module))):
            delattr(module, attr)


register(
    Optimization(
        name="token_merging",
        label="token merging (ToMe)",
        group="speed",
        description=(
            "Merge similar image tokens before self-attention (ToMe for SD via tomesd): faster attention at "
            "large sizes; the image changes a little."
        ),
        requires=("module:tomesd", "family:sd|sdxl"),
        reasons={"family": "patches the BasicTransformerBlocks of SD UNets, which transformers lack"},
        conflict_reason=(
            "it merges tokens in the UNet's transformer blocks in Python, which a traced UNet's fixed "
            "graph never runs"
        ),
        conflicts=("jit_trace_unet",),
        apply=enable_token_merging,
        revert=disable_token_merging,
        settings=TokenMergingSettings,
        order=40,
        autotune="candidate",
        grid=({"ratio": 0.3}, {"ratio": 0.5}),
        presets=(),
        ladder_rung=None,
        memory_effect=NO_MEMORY_EFFECT,
    )
)
