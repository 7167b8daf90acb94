"""Which measured configurations keep the math and which change the image, and the best of each.

A configuration keeps the math when its image is within the suite's threshold of the reference image: the
baseline's on a CPU (at least 100 dB: fp32 arithmetic, another order of additions), the reference row's on a
GPU (the same precision, at least 60 dB from fp16's image: what compiling and fusing move). Everything else
that ran changes the image. The best of each kind is the one with the highest median speedup; a best that is
not faster than the baseline beyond noise is still named, with its verdict ("none faster").
"""

from __future__ import annotations

import math
from typing import Any

KEEPS, CHANGES = "keeps_the_math", "changes_the_image"
KINDS = (KEEPS, CHANGES)
WORDS = {KEEPS: "keeps the math", CHANGES: "changes the image"}
# A pick's figures, copied from its row (the shared vocabulary's keys).
FIGURES = (
    "seconds_per_image",
    "steps_per_s",
    "speedup",
    "speedup_min",
    "speedup_max",
    "verdict",
    "rounds",
    "psnr_db",
    "ssim",
    "fidelity",
    "prompt_score",
    "prompt_score_change",
    "first_call_s",
    "first_call_phase",
    "prepare_s",
    "peak_memory_mb",
)


def db(value: float | None) -> float | None:
    """A PSNR for JSON: None for identical images (inf) or none measured (nan), rounded otherwise."""
    return None if value is None or not math.isfinite(value) else round(value, 2)


def kind_of(
    record: dict[str, Any], reference_psnr: float | None, dtype: str, reference: str | None, keep_db: float
) -> str | None:
    """KEEPS, CHANGES, or None for what is no candidate (the baseline, the reference row, a failed row).

    Args:
        record: the configuration's row in the shared vocabulary.
        reference_psnr: its image against the reference image in dB (inf or None: identical).
        dtype: its precision ('fp32', 'fp16', 'bf16').
        reference: the reference row's configuration on a GPU ('fp16'), None on a CPU (the baseline).
        keep_db: the threshold.
    """
    if record["status"] != "ok" or record.get("verdict") == "baseline" or record["config"] == reference:
        return None
    if reference is not None and dtype != reference:
        return CHANGES
    if reference_psnr is None or math.isinf(reference_psnr) or reference_psnr >= keep_db:
        return KEEPS
    return CHANGES


def pick(
    kind: str, record: dict[str, Any], reference: str | None = None, reference_psnr: float | None = None
) -> dict[str, Any]:
    """A winning configuration as a card holds it: its kind, its configuration as Compare and Generate take
    it, and its figures (from its row)."""
    return {
        "kind": kind,
        "config": record["config"],
        "aside": None,
        "against": None,
        "note": None,
        **{key: record.get(key) for key in FIGURES},
        "reference": reference,
        "reference_psnr_db": db(reference_psnr) if reference else None,
    }


def _speed(p: dict[str, Any]) -> float:
    return p["speedup"] if p.get("speedup") is not None else -math.inf


def best(candidates: list[dict[str, Any]], kind: str) -> dict[str, Any] | None:
    """The pick of `kind` with the highest median speedup, None when there is none."""
    mine = [p for p in candidates if p["kind"] == kind]
    return max(mine, key=_speed) if mine else None


def winners(candidates: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The best configuration keeping the math, then the best changing the image (those that exist)."""
    return [p for kind in KINDS if (p := best(candidates, kind)) is not None]


def faster(p: dict[str, Any] | None) -> bool:
    return p is not None and p.get("verdict") == "faster"
