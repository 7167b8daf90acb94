"""What a technique builds for a live pipeline, kept for its next apply and released when no longer wanted.

A traced UNet, a compiled denoiser, OpenVINO's converted parts, a loaded compiled package: each costs seconds
to build and holds memory while it lives. A studio applies and reverts techniques on the same pipeline all
day, so what an apply builds for a configuration is kept in one bounded, least-recently-used store per live
pipeline (`KeptBuilds`, in the pipeline's state) and handed back to the next apply of the same configuration
on the same device: the second apply builds nothing and its first call costs what a later call costs. A revert
leaves nothing else behind. The store holds at most `capacity()` configurations per pipeline
(`STUDIO_KEPT_BUILDS`, default 4); the oldest is released when a new one comes, and all of them with their
pipeline.

Some libraries keep what was built after its last user is gone: TorchScript registers every traced module's
methods in one process-wide compilation unit and never removes them. Techniques register a releaser for that
(`on_release`); `release()` runs them after a build or a pipeline was dropped.
"""

from __future__ import annotations

import gc
import logging
import os
import weakref
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from studio import checks

if TYPE_CHECKING:
    from studio.optimizations.base import Context

log = logging.getLogger(__name__)

T = TypeVar("T")
STATE_KEY = "kept_builds"  # where a live pipeline's store sits in its state
DEFAULT_CAPACITY = 4
_RELEASERS: list[Callable[[], None]] = []
_STORES: weakref.WeakSet[KeptBuilds] = weakref.WeakSet()  # every live pipeline's, for `configurations_kept`


def capacity() -> int:
    """How many configurations' builds each live pipeline keeps (`STUDIO_KEPT_BUILDS`, default 4; 0 keeps
    none: every apply builds again)."""
    raw = os.environ.get("STUDIO_KEPT_BUILDS", "").strip()
    if not raw:
        return DEFAULT_CAPACITY
    return checks.whole("STUDIO_KEPT_BUILDS", raw, 0, 64)


class KeptBuilds:
    """A bounded, least-recently-used map from (part, configuration) to what was built for it."""

    def __init__(self, size: int):
        self.size = size
        self._items: OrderedDict[tuple, Any] = OrderedDict()
        _STORES.add(self)

    def __len__(self) -> int:
        return len(self._items)

    def configurations(self) -> int:
        """How many configurations have builds kept."""
        return len({configuration for _, configuration in self._items})

    def get_or_make(self, key: tuple, make: Callable[[], T]) -> T:
        """What `key` built before, or `make()`'s result, kept (the oldest configuration released beyond
        `size`)."""
        if key in self._items:
            self._touch(key[1])
            return self._items[key]
        built = make()
        if self.size <= 0:
            return built
        self._items[key] = built
        self._touch(key[1])
        evicted = False
        while self.configurations() > self.size:
            oldest = next(iter(self._items))[1]
            for stale in [k for k in self._items if k[1] == oldest]:
                del self._items[stale]
            evicted = True
            log.info("released the builds of the oldest kept configuration")
        if evicted:
            release()
        return built

    def _touch(self, configuration: tuple) -> None:
        """Make every part kept for `configuration` the most recently used."""
        for key in [k for k in self._items if k[1] == configuration]:
            self._items.move_to_end(key)


def configuration(ctx: Context) -> tuple:
    """What decides a build besides its part: the device and every technique applied to the pipeline with its
    settings (a trace taken with fused attention is not the plain UNet's), and the LoRAs it was built over."""
    return (ctx.device, tuple((name, repr(ctx.settings(name))) for name in sorted(ctx.target)), ctx.adapters)


def store(state: dict[str, Any]) -> KeptBuilds:
    """The store of the live pipeline whose state this is (made on first use)."""
    kept = state.get(STATE_KEY)
    if kept is None:
        kept = state[STATE_KEY] = KeptBuilds(capacity())
    return kept


def build_once(ctx: Context, part: str, make: Callable[[], T]) -> T:
    """What an earlier apply built for `part` under this configuration, or `make()`'s result, kept for the
    next.

    Args:
        ctx: the apply's context (its state is the live pipeline's).
        part: what is built ("unet", "vae.decoder", "blocks").
        make: builds it; called only when nothing is kept.
    """
    return store(ctx.state).get_or_make((part, configuration(ctx)), make)


def configurations_kept() -> int:
    """How many configurations' builds the live pipelines of this process keep, all together."""
    return sum(kept.configurations() for kept in list(_STORES))


def on_release(releaser: Callable[[], None]) -> Callable[[], None]:
    """Register `releaser`, run by `release()` (a decorator)."""
    _RELEASERS.append(releaser)
    return releaser


def release() -> None:
    """Collect what dropped builds left, then let each technique free what its library keeps after them (and
    collect what that let go)."""
    gc.collect()
    for releaser in _RELEASERS:
        releaser()
    gc.collect()
