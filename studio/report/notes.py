"""Sentences that explain a table of records: what its Latency and Speedup are (and over how many rounds), the
rows where those two read differently, and the name of a row (with its X value in an X/Y sweep)."""

from __future__ import annotations

from typing import Any

from studio.report.text import seconds

SPEEDUP = "Speedup (range)"  # the title `readable_rows` gives the column
DISAGREE = 1.2  # two readings of one speedup further apart than this factor make a row look contradictory


def point_name(record: dict[str, Any]) -> str:
    """A record's configuration, with its X (and Y) value in an X/Y sweep ('deepcache[interval=2] at steps=4',
    'baseline at seed=3, prompt=square')."""
    if record.get("x") is None or not record.get("axis"):
        return record["config"]
    y = f", {record['y_axis']}={record['y']}" if record.get("y_axis") else ""
    return f"{record['config']} at {record['axis']}={record['x']}{y}"


def sweep_rounds(records: list[dict[str, Any]]) -> int:
    """The interleaved rounds behind a sweep's speedups (0 when nothing was timed)."""
    return max((r.get("rounds") or 0 for r in records if r["status"] == "ok"), default=0)


def speedup_title(records: list[dict[str, Any]]) -> str:
    """The Speedup column's title with the rounds behind it: 'Speedup (range), median of 5 rounds'."""
    rounds = sweep_rounds(records)
    return f"{SPEEDUP}, median of {rounds} round{'s' * (rounds != 1)}" if rounds else SPEEDUP


def figures_legend(records: list[dict[str, Any]]) -> str:
    """What a sweep table's Latency and Speedup are, in one paragraph."""
    rounds = sweep_rounds(records)
    calls = f"{rounds} timed call{'s' * (rounds != 1)}"
    return (
        f"**Latency**: the median of each configuration's own {calls}. **Speedup**: the median of its "
        f"{rounds} per-round ratio{'s' * (rounds != 1)} (the baseline's time ÷ its time, in the same round), "
        "lowest–highest in brackets (from 5 rounds up, the most extreme round on each side left out); a "
        "range that crosses ×1.00 reads *within noise*. The speedup is not the ratio of the two latencies: "
        "when the machine's speed changes between rounds, they can disagree."
    )


def _baseline_of(record: dict[str, Any], records: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The baseline a record was measured against: the sweep's, or in an X/Y sweep the one at its X and Y."""
    return next(
        (
            r
            for r in records
            if r.get("verdict") == "baseline"
            and r["status"] == "ok"
            and (r.get("x"), r.get("y")) == (record.get("x"), record.get("y"))
        ),
        None,
    )


def disagreements(records: list[dict[str, Any]]) -> list[str]:
    """One sentence per row whose latency against the baseline's reads a different speedup from the median of
    its per-round ratios (by more than `DISAGREE`, or on the other side of ×1.00)."""
    found = []
    for r in records:
        base = _baseline_of(r, records)
        if r["status"] != "ok" or r.get("verdict") == "baseline" or base is None:
            continue
        if not r.get("speedup") or not r.get("latency_s") or not base.get("latency_s"):
            continue
        medians, speedup = base["latency_s"] / r["latency_s"], r["speedup"]
        apart = max(medians, speedup) / min(medians, speedup) > DISAGREE
        sides = (medians > 1.02 and speedup < 0.98) or (medians < 0.98 and speedup > 1.02)
        if apart or sides:
            found.append(
                f"⚠ {point_name(r)}: its median latency against the baseline's ({seconds(r['latency_s'])} vs "
                f"{seconds(base['latency_s'])}) reads ×{medians:.2f}, the median of its per-round ratios "
                f"×{speedup:.2f}. The machine's speed changed between rounds, so neither figure is reliable: "
                "measure again when it is quiet, with more rounds."
            )
    return found
