"""The one timing protocol (studio.measure.protocol), with fake calls: no model, no clock but the one
we set."""

from __future__ import annotations

import pytest

from studio.measure import protocol
from studio.measure.protocol import (
    FASTER,
    NOISE,
    SLOWER,
    Dropped,
    interleaved,
    speedup,
    trimmed,
    unsettled,
    verdict,
)


def fake_calls(seconds: dict[str, float], log: list[str], slow: dict[tuple[str, int], float] | None = None):
    """Calls that record themselves and return their own timed seconds; `slow[(label, n)]` multiplies
    call n."""
    counts = dict.fromkeys(seconds, 0)

    def make(label: str):
        def call() -> float:
            log.append(label)
            counts[label] += 1
            return seconds[label] * (slow or {}).get((label, counts[label]), 1.0)

        return call

    return {label: make(label) for label in seconds}


def test_warmups_per_configuration_then_interleaved_rounds():
    calls, before = [], []
    samples = interleaved(
        fake_calls({"A": 1.0, "B": 0.5, "C": 2.0}, calls),
        rounds=3,
        warmup=2,
        before=lambda phase, label: before.append((phase, label)),
    )
    warm = [("warmup", x) for x in "AABBCC"]
    rounds = [("round", x) for x in "ABC" * 3]
    assert before == warm + rounds
    assert calls == [label for _, label in before], "every call is announced, just before it runs"
    assert samples.warmups == {"A": [1.0, 1.0], "B": [0.5, 0.5], "C": [2.0, 2.0]}
    assert samples.timed == {"A": [1.0] * 3, "B": [0.5] * 3, "C": [2.0] * 3} and samples.dropped == {}


def test_a_call_that_returns_none_is_timed_by_the_protocol(monkeypatch):
    clock = iter([10.0, 10.25, 20.0, 20.5])
    monkeypatch.setattr(protocol.time, "perf_counter", lambda: next(clock))
    samples = interleaved({"A": lambda: None, "B": lambda: None}, rounds=1, warmup=0)
    assert samples.timed == {"A": [0.25], "B": [0.5]}


def test_one_disturbed_baseline_round_flips_no_verdict_with_five_rounds():
    """Round 3's baseline runs 3x slow (another process woke up): every ratio of that round jumps, but
    the trimmed range drops that round, so no verdict changes."""
    calls: list[str] = []
    times = {"base": 1.0, "twice_as_fast": 0.5, "same": 1.0, "twice_as_slow": 2.0}
    samples = interleaved(fake_calls(times, calls, slow={("base", 4): 3.0}), rounds=5, warmup=1)
    base = samples.timed["base"]
    assert base == [1.0, 1.0, 3.0, 1.0, 1.0], "the disturbance hit the third timed round"
    results = {label: speedup(base, samples.timed[label]) for label in times if label != "base"}
    assert results["twice_as_fast"].verdict == FASTER
    assert results["same"].verdict == NOISE
    assert results["twice_as_slow"].verdict == SLOWER
    assert results["same"].median == 1.0 and results["same"].high == 1.0, (
        "the range shown is the one the verdict reads: the disturbed round is left out of it"
    )
    assert max(results["same"].ratios) == 3.0, "every round's ratio is kept"
    fast = results["twice_as_fast"]
    assert fast.low > 1.0, "a faster verdict never shows a range that crosses x1.00"
    assert results["twice_as_fast"].median == 2.0 and results["twice_as_slow"].median == 0.5
    assert speedup(base, base, is_reference=True).verdict == protocol.BASELINE


def test_one_disturbed_round_can_flip_a_verdict_with_three_rounds_nothing_is_trimmed():
    assert trimmed([0.5, 1.5, 0.5]) == [0.5, 0.5, 1.5]
    assert verdict([0.5, 1.5, 0.5]) == NOISE, "the same disturbance as above, without a round to spare"
    assert verdict([1.01, 1.02, 0.99]) == NOISE
    assert verdict([1.01, 1.02, 1.03]) == NOISE, "every round agrees, but by 2% or less"
    assert verdict([1.04, 1.05, 1.03]) == FASTER


def test_trimming_drops_one_extreme_round_per_side_per_four_beyond_the_first():
    assert trimmed([5, 1, 3, 2, 4]) == [2, 3, 4]
    assert trimmed([1, 2, 3, 4]) == [1, 2, 3, 4]
    assert len(trimmed(list(range(9)))) == 5
    assert verdict([]) == NOISE


def test_dropped_takes_a_configuration_out_of_later_rounds():
    calls: list[str] = []
    counts = {"B": 0}

    def failing() -> float:
        calls.append("B")
        counts["B"] += 1
        if counts["B"] == 2:  # its warm-up worked, its first timed round fails
            raise Dropped("B ran out of memory")
        return 1.0

    samples = interleaved(
        {"A": lambda: calls.append("A") or 1.0, "B": failing, "C": lambda: calls.append("C") or 1.0},
        rounds=3,
        warmup=1,
    )
    assert calls == ["A", "B", "C", "A", "B", "C", "A", "C", "A", "C"]
    assert samples.dropped == {"B": "B ran out of memory"}
    assert samples.timed["B"] == [] and samples.timed["A"] == samples.timed["C"] == [1.0] * 3


def test_other_errors_propagate():
    def broken() -> float:
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        interleaved({"A": lambda: 1.0, "B": broken}, rounds=2, warmup=0)


def test_unsettled_flags_a_first_round_twice_as_slow():
    assert unsettled([2.0, 1.0, 1.0, 1.0])
    assert not unsettled([1.2, 1.0, 1.0, 1.0]), "within the factor"
    assert not unsettled([1.0, 1.0, 1.0, 2.0]), "a late slow round is noise, not a short warm-up"
    assert not unsettled([2.0, 1.0]), "too few rounds to tell"


def test_speedup_is_the_median_of_per_round_ratios_not_a_ratio_of_medians():
    result = speedup([1.0, 3.0, 3.0], [1.0, 1.0, 3.0])  # medians 3.0 and 1.0: a ratio of medians would say x3
    assert result.ratios == (1.0, 3.0, 1.0) and (result.median, result.low, result.high) == (1.0, 1.0, 3.0)
    with pytest.raises(ValueError):
        speedup([1.0], [])


def test_a_gain_too_small_to_matter_is_within_noise_even_when_every_round_agrees():
    from studio.measure.protocol import verdict

    assert verdict([1.005, 1.01, 1.003, 1.008, 1.01]) == "within noise"
    assert verdict([0.995, 0.99, 0.997, 0.992, 0.99]) == "within noise"
    assert verdict([1.05, 1.04, 1.06, 1.05, 1.03]) == "faster"
    assert verdict([0.95, 0.96, 0.94, 0.95, 0.97]) == "slower"
