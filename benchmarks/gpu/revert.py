"""Whether reverting a technique gives back exactly the baseline: on one shared pipeline (its own studio, the
way a user's requests switch configurations), baseline, technique, baseline again, at a few steps; the last
image must equal the first bit for bit, and the denoiser must be back on the device (`--no-reverts` skips it).

Plain techniques are checked first, then compiled ones (a compile costs minutes), then those that place
modules themselves (offload): the manager rebuilds the pipeline after them, and whatever that leaves behind
must not be blamed on the techniques checked after it.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import Any

import numpy as np

from benchmarks.gpu.common import new_studio, release
from benchmarks.gpu.plan import ModelPlan, Plan
from studio.engine import Studio
from studio.measure import bench
from studio.optimizations import REGISTRY
from studio.optimizations.denoiser import denoiser
from studio.request import GenerationRequest, with_config

log = logging.getLogger(__name__)
RESERVE_S = 45.0  # seconds kept back for the sections' records and the report


def _images(studio: Studio, request: GenerationRequest) -> tuple[np.ndarray | None, str]:
    """One call of `request` through the manager, and where its denoiser (UNet, transformer) was; no call
    (None) when it is not on the request's device (a call on the wrong device can take minutes)."""
    with studio.manager.acquire(request) as prepared:
        where = str(next(denoiser(prepared.pipe).parameters()).device)
        if where != request.device and not any(
            o.places_modules for o in map(REGISTRY.get, request.optimizations)
        ):
            return None, where
        return bench.run_once(prepared, request).images, where


def _order(row: dict[str, Any]) -> tuple[bool, bool]:
    """Plain techniques first, then compiled ones (a compile costs minutes), then those that place modules."""
    applied = row.get("applied") or ()
    return any(REGISTRY[name].places_modules for name in applied), "torch_compile" in applied


def _check(studio: Studio, base: GenerationRequest, row: dict[str, Any], reference: np.ndarray) -> None:
    """Apply the row's configuration, run the baseline again, and record what came back."""
    try:
        _images(studio, with_config(base, row["config"]))
        after, where = _images(studio, base)
    except Exception as exc:  # recorded with the row: the other techniques are still checked
        log.exception("revert check of %s failed", row["config"])
        row.update(revert_exact=None, revert_note=f"check failed: {type(exc).__name__}: {exc}")
        return
    if after is None:
        row.update(
            revert_exact=False,
            revert_note=f"after the revert the denoiser was on {where}, not {base.device}",
        )
        return
    row["revert_exact"] = bool(np.array_equal(after, reference))
    if not row["revert_exact"]:
        row["revert_note"] = f"max abs difference {float(np.abs(after - reference).max()):.2e}"


def check_reverts(
    plan: Plan,
    model: ModelPlan,
    request: GenerationRequest,
    rows: list[dict[str, Any]],
    save: Callable[[], None],
) -> None:
    """Fill `revert_exact` (and `revert_note` when there is something to say) in the measured rows, calling
    `save` after each."""
    todo = [r for r in rows if r.get("status") == "ok" and r.get("technique") != "baseline"]
    if not todo or not plan.reverts:
        return
    studio = new_studio(plan, f"{model.role}-revert")
    base = dataclasses.replace(request, steps=plan.revert_steps)
    reference = _images(studio, base)[0]
    repeatable = bool(np.array_equal(_images(studio, base)[0], reference))
    for row in rows:
        if row.get("technique") == "baseline":
            row["revert_note"] = f"reference; two baseline calls identical: {repeatable}"
    for row in sorted(todo, key=_order):
        if plan.left() < RESERVE_S:
            row.update(revert_exact=None, revert_note="not checked: out of time")
            continue
        _check(studio, base, row, reference)
        save()
    del studio
    release(plan)
