"""Interleaved timing for benchmark scripts: A B A B ... so drift hits every variant alike."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def interleaved(variants: dict[str, Callable[[], object]], rounds: int, warmup: int = 1) -> dict[str, list[float]]:
    """Run each variant once per round, in turn, after `warmup` untimed rounds; seconds per call."""
    for _ in range(warmup):
        for fn in variants.values():
            fn()
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(rounds):
        for name, fn in variants.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return times


def describe(samples: list[float]) -> str:
    """Median with min-max, in seconds."""
    return f"{statistics.median(samples):.4f}s (min {min(samples):.4f}, max {max(samples):.4f}, n={len(samples)})"


def overhead(ours: list[float], reference: list[float]) -> float:
    """Relative overhead of the medians: 0.02 means 2% slower than the reference."""
    return statistics.median(ours) / statistics.median(reference) - 1
