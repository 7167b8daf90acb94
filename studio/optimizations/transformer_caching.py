"""Step caches for transformer denoisers, through diffusers 0.42's own hooks (`diffusers.hooks`).

Adjacent denoising steps compute nearly the same features; each cache reuses some of them:
- `first_block_cache` (FirstBlockCacheConfig): run the first block; when its output changed by less than
  `threshold` (relative L1) since the last full step, reuse the remaining blocks' residual.
- `pyramid_attention_broadcast` (PyramidAttentionBroadcastConfig): recompute each attention every `skip_range`
  steps inside a window of timesteps and broadcast its last output in between.
- `faster_cache` (FasterCacheConfig): approximate skipped attention outputs from the last two computed ones,
  and, with classifier-free guidance, the unconditional branch from the conditional one.
- `taylorseer_cache` (TaylorSeerCacheConfig): compute fully every `cache_interval` steps and predict the steps
  in between with a Taylor expansion of the blocks' outputs (order `max_order`).

Applied with the model's `enable_cache(config)` and removed with `disable_cache()`; the hook registry's
leftovers are tidied (studio.optimizations.hooks), so revert gives back the loaded model exactly. The caches
keep per-run state, which diffusers resets at the end of each pipeline call; it is also reset before each call
here, so a cancelled run leaves nothing behind. They need the model's `CacheMixin` and the cache context its
pipeline sets: Flux has both; diffusers 0.42's SD3 transformer has neither.

`first_block_cache` counts, in the pipeline's stats (`steps_reused`), the denoiser calls of the last pipeline
call and those whose remaining blocks it reused: the share of steps the cache skipped.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from diffusers import hooks

from studio import checks
from studio.optimizations.base import Context, Optimization, Settings, register
from studio.optimizations.denoiser import denoiser
from studio.optimizations.facts import DEFAULTS_ONLY, NO_MEMORY_EFFECT, Preset
from studio.optimizations.hooks import tidy

STATE = "step_cache"  # (technique, model) while applied
COUNTER = "step_cache_counter"  # the forward hook that counts first_block_cache's reused calls
REUSED = "steps_reused"  # stats: [reused, calls] of the denoiser in the last pipeline call
LEADER_HOOK = "fbc_leader_block_hook"  # diffusers' name for FirstBlockCache's hook on the first block
CACHES = ("first_block_cache", "pyramid_attention_broadcast", "faster_cache", "taylorseer_cache")
REASONS = {"family": "needs diffusers' cache hooks (CacheMixin), which only Flux's transformer has in 0.42"}


@dataclass(frozen=True)
class FirstBlockCacheSettings(Settings):
    """`threshold`: the first block's relative change below which the other blocks' residual is reused."""

    threshold: float = 0.05

    def __post_init__(self) -> None:
        self._set("threshold", checks.number("first_block_cache threshold", self.threshold, 0.001, 2.0))


@dataclass(frozen=True)
class BroadcastSettings(Settings):
    """`skip_range`: attention is recomputed every N steps; `timestep_start`, `timestep_end`: the window of
    timesteps (0-1000) where it may be skipped."""

    skip_range: int = 2
    timestep_start: int = 100
    timestep_end: int = 800

    def __post_init__(self) -> None:
        self._set(
            "skip_range", checks.whole("pyramid_attention_broadcast skip_range", self.skip_range, 2, 10)
        )
        self._set("timestep_start", checks.whole("timestep_start", self.timestep_start, -1, 1000))
        self._set(
            "timestep_end", checks.whole("timestep_end", self.timestep_end, self.timestep_start + 1, 1001)
        )


@dataclass(frozen=True)
class FasterCacheSettings(Settings):
    """`skip_range`: attention is recomputed every N steps below `timestep_end` (0-1000);
    `uncond_skip_range`: with guidance, the unconditional branch is computed every N steps."""

    skip_range: int = 2
    timestep_end: int = 681
    uncond_skip_range: int = 5

    def __post_init__(self) -> None:
        self._set("skip_range", checks.whole("faster_cache skip_range", self.skip_range, 2, 10))
        self._set("timestep_end", checks.whole("faster_cache timestep_end", self.timestep_end, 1, 1000))
        self._set(
            "uncond_skip_range", checks.whole("faster_cache uncond_skip_range", self.uncond_skip_range, 2, 10)
        )


@dataclass(frozen=True)
class TaylorSeerSettings(Settings):
    """`cache_interval`: a full step every N steps; `disable_cache_before_step`: steps always computed first;
    `max_order`: the Taylor expansion's order."""

    cache_interval: int = 5
    disable_cache_before_step: int = 3
    max_order: int = 1

    def __post_init__(self) -> None:
        self._set(
            "cache_interval", checks.whole("taylorseer_cache cache_interval", self.cache_interval, 2, 20)
        )
        first = checks.whole(
            "taylorseer_cache disable_cache_before_step", self.disable_cache_before_step, 1, 50
        )
        self._set("disable_cache_before_step", first)
        self._set("max_order", checks.whole("taylorseer_cache max_order", self.max_order, 1, 4))


def _config(name: str, pipe: Any, ctx: Context) -> Any:
    """The diffusers config of cache `name` with the request's settings."""
    s = ctx.settings(name)
    now = lambda: pipe.current_timestep  # noqa: E731 (read at each step)
    if name == "first_block_cache":
        return hooks.FirstBlockCacheConfig(threshold=s.threshold)
    if name == "pyramid_attention_broadcast":
        window = (s.timestep_start, s.timestep_end)
        return hooks.PyramidAttentionBroadcastConfig(
            spatial_attention_block_skip_range=s.skip_range,
            spatial_attention_timestep_skip_range=window,
            current_timestep_callback=now,
        )
    if name == "faster_cache":
        return hooks.FasterCacheConfig(
            spatial_attention_block_skip_range=s.skip_range,
            spatial_attention_timestep_skip_range=(-1, s.timestep_end),
            unconditional_batch_skip_range=s.uncond_skip_range,
            current_timestep_callback=now,
            tensor_format="BCHW",
            is_guidance_distilled=ctx.family == "flux",
        )
    return hooks.TaylorSeerCacheConfig(
        cache_interval=s.cache_interval,
        disable_cache_before_step=s.disable_cache_before_step,
        max_order=s.max_order,
        taylor_factors_dtype=denoiser(pipe).dtype,
    )


def _leader_states(model: Any) -> Any:
    """FirstBlockCache's state manager: per cache context, the state the blocks share (its `should_compute`:
    whether the call ran them all)."""
    for module in model.modules():
        registry = getattr(module, "_diffusers_hook", None)
        hook = registry.get_hook(LEADER_HOOK) if registry is not None else None
        if hook is not None:
            return hook.state_manager
    raise RuntimeError(f"first_block_cache installed no {LEADER_HOOK} on {type(model).__name__}")


def _count_reuse(model: Any, ctx: Context) -> None:
    """Count each denoiser call, and those whose remaining blocks the cache reused, in `ctx.stats` (read in
    the call's cache context, which the pipeline sets around it)."""
    states = _leader_states(model)
    ctx.stats[REUSED] = [0, 0]

    def counted(module: Any, args: Any, output: Any) -> None:
        reused, calls = ctx.stats.get(REUSED, [0, 0])
        ctx.stats[REUSED] = [reused + (not states.get_state().should_compute), calls + 1]

    ctx.state[COUNTER] = model.register_forward_hook(counted)


def _enabler(name: str):
    def apply(pipe: Any, ctx: Context) -> None:
        model = denoiser(pipe)
        model.enable_cache(_config(name, pipe, ctx))
        ctx.state[STATE] = (name, model)
        if name == "first_block_cache":
            _count_reuse(model, ctx)

    return apply


def disable(pipe: Any, ctx: Context) -> None:
    """Remove the cache's hooks and what the hook registry leaves behind."""
    counter = ctx.state.pop(COUNTER, None)
    if counter is not None:
        counter.remove()
        ctx.stats.pop(REUSED, None)
    saved = ctx.state.pop(STATE, None)
    if saved is not None:
        saved[1].disable_cache()
        tidy(saved[1])


@contextlib.contextmanager
def fresh_state(ctx: Context) -> Iterator[None]:
    """Reset the cache's per-run state before a pipeline call."""
    saved = ctx.state.get(STATE)
    if saved is not None:
        saved[1]._reset_stateful_cache()
    if COUNTER in ctx.state:
        ctx.stats[REUSED] = [0, 0]
    yield


def _register(name: str, label: str, description: str, settings: type[Settings], **facts: Any) -> None:
    """Register a transformer step cache; `facts`: its grid and presets (in no rung, no memory effect)."""
    register(
        Optimization(
            name=name,
            label=label,
            group="speed",
            description=description,
            requires=("family:flux",),
            reasons=REASONS,
            conflict_reason=(
                "each cache installs its own hooks on the transformer's blocks, and one decides what is "
                "reused"
            ),
            conflicts=tuple(c for c in CACHES if c < name),
            apply=_enabler(name),
            revert=disable,
            call_context=fresh_state,
            settings=settings,
            order=40,
            autotune="candidate",
            ladder_rung=None,
            memory_effect=NO_MEMORY_EFFECT,
            **facts,
        )
    )


_register(
    "first_block_cache",
    "first block cache",
    "Reuse the transformer's remaining blocks when its first block's output barely changed since the last "
    "full step (diffusers' FirstBlockCache, setting threshold); the image changes a little.",
    FirstBlockCacheSettings,
    grid=({"threshold": 0.05}, {"threshold": 0.1}, {"threshold": 0.2}),
    presets=(Preset(90, ("first_block_cache",)), Preset(100, ("bf16", "first_block_cache"))),
)
_register(
    "pyramid_attention_broadcast",
    "pyramid attention broadcast",
    "Recompute the transformer's attention every few steps in a window of timesteps and reuse it in between "
    "(diffusers' PyramidAttentionBroadcast); the image changes a little.",
    BroadcastSettings,
    grid=({"skip_range": 2}, {"skip_range": 3}),
    presets=(),
)
_register(
    "faster_cache",
    "FasterCache",
    "Approximate skipped attention outputs from the last two computed ones, and with guidance the "
    "unconditional branch from the conditional one (diffusers' FasterCache); the image changes a little.",
    FasterCacheSettings,
    grid=DEFAULTS_ONLY,
    presets=(),
)
_register(
    "taylorseer_cache",
    "TaylorSeer cache",
    "Compute the transformer fully every few steps and predict the steps in between with a Taylor "
    "expansion of its blocks' outputs (diffusers' TaylorSeer); the image changes a little.",
    TaylorSeerSettings,
    grid=({"cache_interval": 3}, {"cache_interval": 5}),
    presets=(),
)
