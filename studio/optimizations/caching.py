"""Feature caching across denoising steps: DeepCache (Ma et al., 2023) on UNets.

Adjacent denoising steps produce nearly the same deep (low-resolution) features. Every
`interval`-th UNet call runs in full and caches the outputs of the deep blocks; the
calls in between recompute only the shallow blocks (`conv_in`, the first `branch + 1`
down blocks, the last `branch + 1` up blocks, `conv_out`) and reuse the cached deep
down, mid and up block outputs. The shallow up block still gets fresh skip features
from the shallow down block, as in the paper.

The diffusers 0.42 caching hooks (FasterCache, FirstBlockCache, PyramidAttentionBroadcast,
...) target transformer denoisers, and the DeepCache package's helper leaves bound
`forward` attributes behind on removal and finds the step by looking the timestep up
in the scheduler (wrong for schedulers that repeat timesteps). So the hooks are ours:
each deep block gets an instance `forward` that is deleted on revert, and the UNet a
forward pre-hook whose handle is removed, so the loaded modules come back exactly.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from studio import checks
from studio.errors import ValidationError
from studio.optimizations.base import Context, Optimization, Settings, register
from studio.optimizations.facts import NO_MEMORY_EFFECT

MAX_INTERVAL = 10
MAX_BRANCH = 3  # SD and SDXL UNets have 4 / 3 down blocks; the UNet itself is checked when applied


@dataclass(frozen=True)
class DeepCacheSettings(Settings):
    """`interval`: a full UNet step every N calls (1 = never reuse); `branch`: how many outer blocks always
    run."""

    interval: int = 3
    branch: int = 0

    def __post_init__(self) -> None:
        self._set("interval", checks.whole("deepcache interval", self.interval, 1, MAX_INTERVAL))
        self._set("branch", checks.whole("deepcache branch", self.branch, 0, MAX_BRANCH))


COUNTERS = (
    "deepcache_full_calls",
    "deepcache_reused_calls",
)  # UNet calls, in the pipeline's stats while applied


@dataclass
class DeepCacheState:
    """Per-UNet bookkeeping: which call of the current pipeline run this is, and the cache."""

    interval: int
    timesteps: Any = None
    calls: int = 0
    reuse: bool = False
    key: tuple | None = None
    cache: dict[str, Any] = field(default_factory=dict)
    stats: dict[str, Any] = field(default_factory=dict)


def deep_blocks(unet: torch.nn.Module, branch: int) -> list[tuple[str, torch.nn.Module]]:
    """The blocks whose outputs are cached: down blocks after `branch`, the mid block, up blocks before the
    last `branch + 1`."""
    n = len(unet.down_blocks)
    if branch > max(0, n - 2):
        raise ValidationError(
            f"deepcache branch {branch} leaves no deep down block to cache on a UNet with {n} down blocks; "
            f"use a branch from 0 to {max(0, n - 2)}."
        )
    blocks = [(f"down_blocks.{i}", unet.down_blocks[i]) for i in range(branch + 1, n)]
    if unet.mid_block is not None:
        blocks.append(("mid_block", unet.mid_block))
    blocks += [(f"up_blocks.{i}", unet.up_blocks[i]) for i in range(len(unet.up_blocks) - branch - 1)]
    return blocks


def _input_key(args: tuple, kwargs: dict) -> tuple:
    sample = args[0] if args else kwargs["sample"]
    context = kwargs.get("encoder_hidden_states", args[2] if len(args) > 2 else None)
    shape = None if context is None else tuple(context.shape)
    return tuple(sample.shape), sample.dtype, sample.device, shape


def _before_unet(pipe: Any, state: DeepCacheState) -> Callable:
    """A new pipeline run is recognised by a new `scheduler.timesteps` tensor (set_timesteps makes one per
    call)."""

    def hook(module: torch.nn.Module, args: tuple, kwargs: dict) -> None:
        timesteps = getattr(pipe.scheduler, "timesteps", None)
        if timesteps is None or timesteps is not state.timesteps:
            state.timesteps, state.calls = timesteps, 0
        else:
            state.calls += 1
        key = _input_key(args, kwargs)
        state.reuse = state.calls % state.interval != 0 and key == state.key
        if not state.reuse:
            state.key = key
            state.cache.clear()
        counter = COUNTERS[state.reuse]
        state.stats[counter] = state.stats.get(counter, 0) + 1

    return hook


def _caching_forward(name: str, block: torch.nn.Module, state: DeepCacheState) -> Callable:
    original = block.forward

    def forward(*args: Any, **kwargs: Any) -> Any:
        if state.reuse and name in state.cache:
            return state.cache[name]
        out = original(*args, **kwargs)
        state.cache[name] = out
        return out

    return forward


def enable_deepcache(pipe: Any, ctx: Context) -> None:
    """Cache the deep blocks' outputs of `pipe.unet` and reuse them between full steps.

    Args:
        pipe: a pipeline with a `UNet2DConditionModel` as `unet` and a `scheduler`.
        ctx: the request; its `DeepCacheSettings` say `interval` and `branch`.
    """
    settings = ctx.settings("deepcache")
    unet = pipe.unet
    blocks = deep_blocks(unet, settings.branch)
    state = DeepCacheState(interval=settings.interval, stats=ctx.stats)
    previous = [vars(block).get("forward") for _, block in blocks]  # another hook's instance forward, if any
    for name, block in blocks:
        block.forward = _caching_forward(name, block, state)
    handle = unet.register_forward_pre_hook(_before_unet(pipe, state), with_kwargs=True)
    ctx.state["deepcache"] = (blocks, previous, handle, state)


def disable_deepcache(pipe: Any, ctx: Context) -> None:
    """Remove the hooks: the blocks' `forward` is what it was before and the cache is dropped."""
    saved = ctx.state.pop("deepcache", None)
    if saved is None:
        return
    blocks, previous, handle, state = saved
    handle.remove()
    for (_, block), forward in zip(blocks, previous, strict=True):
        if forward is None:
            del block.forward
        else:
            block.forward = forward
    state.cache.clear()
    for counter in COUNTERS:
        ctx.stats.pop(counter, None)


register(
    Optimization(
        name="deepcache",
        label="DeepCache",
        group="speed",
        description=(
            "Reuse the UNet's deep features between full steps (DeepCache): only the outermost blocks run on "
            "the steps in between; the image changes a little."
        ),
        requires=("family:sd|sdxl",),
        reasons={"family": "caches a UNet's deep blocks; transformers have step caches of their own"},
        conflict_reason=(
            "DeepCache skips parts of the UNet call by call, which a traced UNet's fixed graph cannot"
        ),
        conflicts=("jit_trace_unet",),
        apply=enable_deepcache,
        revert=disable_deepcache,
        settings=DeepCacheSettings,
        order=40,
        autotune="candidate",
        grid=({"interval": 2}, {"interval": 3}, {"interval": 5}),
        presets=(),
        ladder_rung=None,
        memory_effect=NO_MEMORY_EFFECT,
    )
)
