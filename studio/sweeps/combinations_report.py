"""What combines with what, in words and data for its faces: the grid of cell texts, why each cell without
figures has none, a headline paragraph, and the JSON the API and `--json` give (`studio.sweeps.combinations`
plans and measures it)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from studio import report
from studio.sweeps.combinations import CombinationsResult


def grid(result: CombinationsResult) -> list[list[str]]:
    """Rows x columns of cell texts: the upper triangle (a pair is one cell), the technique alone on the
    diagonal."""
    names, by = result.plan.techniques, {(c.row, c.column): c for c in result.cells}
    return [[by[a, b].text() if (a, b) in by else "" for b in names] for a in names]


def reasons(result: CombinationsResult) -> list[str]:
    """Why each cell that has no figures has none, and why each technique left out is, one line each."""
    lines = [
        f"{c.row}{f' + {c.column}' * (c.row != c.column)}: {c.outcome}: {c.reason}" for c in result.cells
    ]
    left = [f"{name}: not in the combinations: {why}" for name, why in result.plan.left_out.items()]
    return [line for line, c in zip(lines, result.cells, strict=True) if c.reason] + left


def headline(result: CombinationsResult) -> str:
    """What was measured, how, and how many cells had each outcome, in one paragraph."""
    base, plan, plural = result.plan.request, result.plan, lambda n: "s" if n != 1 else ""
    counts = ", ".join(f"{n} {outcome}" for outcome, n in Counter(c.outcome for c in result.cells).items())
    text = (
        f"{len(plan.techniques)} techniques on {base.model} ({base.device}), {base.steps} steps at "
        f"{base.width}x{base.height}, {plan.rounds} interleaved round{plural(plan.rounds)} after "
        f"{plan.warmup} warm-up call{plural(plan.warmup)}: {counts}."
    )
    if result.baseline is not None and result.baseline.get("latency_s") is not None:
        text += f" Baseline {report.seconds(result.baseline['latency_s'])} per call."
    note = report.host_note([c.record for c in result.cells if c.record] + [result.baseline or {}])
    return " ".join(filter(None, [result.stopped, text, note]))


def as_json(result: CombinationsResult) -> dict[str, Any]:
    """The combinations as the API and `--json` give them: the request, the cells, the baseline's record."""
    base, plan = result.plan.request, result.plan
    return {
        "model": base.model,
        "device": base.device,
        **{k: getattr(base, k) for k in ("steps", "width", "height", "seed", "prompt")},
        "warmup": plan.warmup,
        "rounds": plan.rounds,
        "group_id": result.group_id,
        "techniques": list(plan.techniques),
        "left_out": plan.left_out,
        "estimate_s": round(plan.estimate_s, 1),
        "stopped": result.stopped,
        "baseline": result.baseline,
        "cells": [c.as_json() for c in result.cells],
        "reasons": reasons(result),
    }
