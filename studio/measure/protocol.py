"""The one timing protocol for every comparison: warm-up, interleaved rounds, ratios with their range.

The CPUs this studio runs on change speed by +-25% within minutes, so configurations timed one after
another in blocks are compared across different machine speeds. Here every configuration runs once
per round (A B C, A B C, ...), a speedup is computed per round against that round's baseline, and the
reported speedup is the median of those ratios with their min-max. Drift hits every configuration of a
round alike and cancels in the ratio.

The verdict reads the range of the per-round ratios: *faster* when every round (after dropping the most
extreme round on each side once there are 5 or more) has the configuration ahead, *slower* when every
round has it behind, *within noise* otherwise, and always when the median is within 2% of x1.00. One disturbed
round cannot flip a verdict with 5 rounds.
Compare, Ladder, Auto-tune, the distributed sweeps and the scripts in `benchmarks/` all use this module.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

FASTER, SLOWER, NOISE, BASELINE = "faster", "slower", "within noise", "baseline"
MIN_EFFECT = 0.02  # a median within 2% of x1.00 is within noise whatever the rounds say: the hosts drift more
UNSETTLED_FACTOR = (
    1.5  # a first round this much slower than the median of the others: the warm-up was too short
)


class Dropped(Exception):
    """Raised by a call whose configuration cannot go on (it failed); it leaves the later rounds."""


Call = Callable[
    [], float | None
]  # runs one configuration once; returns its own timed seconds, or None to be timed here
Order = Callable[[str, str], None]  # told (phase, label) before each call: "warmup" or "round"


@dataclass
class Samples:
    """Seconds per call: warm-ups and timed rounds per label, and the labels that dropped out (why)."""

    timed: dict[str, list[float]]
    warmups: dict[str, list[float]]
    dropped: dict[str, str]


def interleaved(
    calls: Mapping[str, Call], rounds: int, warmup: int = 1, before: Order | None = None
) -> Samples:
    """Warm each configuration up `warmup` times, then run `rounds` rounds of one call each, in order.

    A call that raises `Dropped` takes its configuration out of the later calls; anything else propagates.
    """
    samples = Samples({label: [] for label in calls}, {label: [] for label in calls}, {})
    plan = [("warmup", label) for label in calls for _ in range(warmup)]
    plan += [("round", label) for _ in range(rounds) for label in calls]
    for phase, label in plan:
        if label in samples.dropped:
            continue
        if before:
            before(phase, label)
        try:
            seconds = _timed(calls[label])
        except Dropped as exc:
            samples.dropped[label] = str(exc)
            continue
        (samples.warmups if phase == "warmup" else samples.timed)[label].append(seconds)
    return samples


def _timed(call: Call) -> float:
    start = time.perf_counter()
    seconds = call()
    return time.perf_counter() - start if seconds is None else seconds


def trimmed(values: list[float]) -> list[float]:
    """The sorted values without the most extreme one on each side per 4 values beyond the first."""
    ordered = sorted(values)
    cut = (len(ordered) - 1) // 4
    return ordered[cut : len(ordered) - cut] if cut else ordered


def verdict(ratios: list[float]) -> str:
    """'faster', 'slower' or 'within noise' from per-round speedups (baseline time / configuration time)."""
    if not ratios:
        return NOISE
    kept, middle = trimmed(ratios), statistics.median(ratios)
    if kept[0] > 1.0 and middle > 1.0 + MIN_EFFECT:
        return FASTER
    if kept[-1] < 1.0 and middle < 1.0 / (1.0 + MIN_EFFECT):
        return SLOWER
    return NOISE


@dataclass(frozen=True)
class Speedup:
    """A configuration against a reference, from the rounds both ran in."""

    median: float
    low: float
    high: float
    verdict: str
    ratios: tuple[float, ...]

    def fields(self) -> dict[str, Any]:
        """As the run log and the shared vocabulary name them."""
        return {
            "speedup": self.median,
            "speedup_min": self.low,
            "speedup_max": self.high,
            "verdict": self.verdict,
        }


def speedup(reference: list[float], other: list[float], *, is_reference: bool = False) -> Speedup:
    """Per-round ratios reference/other (the same round's calls), their median, range and verdict. The range
    is the one the verdict reads (`trimmed`: from 5 rounds up without the most extreme round on each side), so
    a range that crosses x1.00 is never called faster or slower."""
    ratios = tuple(r / o for r, o in zip(reference, other, strict=False) if o > 0)
    if not ratios:
        raise ValueError("no round has a time for both configurations")
    label = BASELINE if is_reference else verdict(list(ratios))
    kept = trimmed(list(ratios))
    return Speedup(statistics.median(ratios), kept[0], kept[-1], label, ratios)


def unsettled(seconds: list[float]) -> bool:
    """The first timed round was much slower than the rest: the warm-up had not finished its work."""
    if len(seconds) < 3:
        return False
    rest = statistics.median(seconds[1:])
    return rest > 0 and seconds[0] > UNSETTLED_FACTOR * rest


def describe(samples: list[float]) -> str:
    """Median with min-max, in seconds (for benchmark scripts' output)."""
    median, low, high = statistics.median(samples), min(samples), max(samples)
    return f"{median:.4f} s (min {low:.4f}, max {high:.4f}, n={len(samples)})"


def overhead(ours: list[float], reference: list[float]) -> float:
    """Relative overhead of the medians: 0.02 means 2% slower than the reference."""
    return statistics.median(ours) / statistics.median(reference) - 1


APART_CAVEAT = (
    "measured apart, not interleaved: the machine's speed may have changed between them, so only a change "
    "beyond both sides' spreads is called slower or faster"
)


def apart(before_s: float, before_spread: float | None, after_s: float, after_spread: float | None) -> str:
    """The verdict on two figures measured apart (another day, other library versions): SLOWER or FASTER
    only when the change is beyond both sides' spreads (max - min of what each side timed), else NOISE;
    "no range" where a side has no spread to judge by."""
    if before_spread is None or after_spread is None:
        return "no range"
    change = after_s - before_s
    if abs(change) <= max(before_spread, after_spread):
        return NOISE
    return SLOWER if change > 0 else FASTER
