"""Timing helpers for benchmark scripts: the engine's own protocol (studio.measure.protocol), re-exported."""

from __future__ import annotations

from collections.abc import Callable

from studio.measure.protocol import describe, interleaved, overhead

__all__ = ["describe", "overhead", "times"]


def _untimed(fn: Callable[[], object]) -> Callable[[], None]:
    def call() -> None:
        fn()

    return call


def times(variants: dict[str, Callable[[], object]], rounds: int, warmup: int = 1) -> dict[str, list[float]]:
    """Seconds per call of each variant, interleaved (A B A B ...) after `warmup` untimed calls each."""
    return interleaved({k: _untimed(f) for k, f in variants.items()}, rounds, warmup).timed
