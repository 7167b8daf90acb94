"""The memory section: the peak memory of one call (the CUDA allocator's peak on a GPU, peak RSS on a CPU)
with each memory technique of the registry, against the baseline: model and sequential CPU offload, VAE
slicing and tiling, attention slicing against SDPA (and classic attention), and any other the registry holds.

It runs first for each model, on a studio of its own, so that nothing else is resident on the device; one
configuration at a time (`Studio.generate`: one warm-up, one measured call), at a few steps and a batch of
`Plan.memory_batch` images (VAE slicing only acts on a batch). The offloads run last: the manager rebuilds
the pipeline after them.
"""

from __future__ import annotations

import logging
from typing import Any

from benchmarks.gpu.common import base_request, baseline_label, new_studio, release
from benchmarks.gpu.plan import ModelPlan, Plan
from benchmarks.gpu.results import Results, not_run
from benchmarks.gpu.techniques import configure, reason
from studio import report
from studio.errors import StudioError
from studio.optimizations import REGISTRY

log = logging.getLogger(__name__)


def configs() -> list[tuple[str, ...]]:
    """The baseline, the attention kernels, and every memory technique of the registry (placing ones last)."""
    memory = sorted((o for o in REGISTRY.values() if o.group == "memory"), key=lambda o: o.places_modules)
    return [(), ("sdpa",), ("classic_attention",), *((o.name,) for o in memory)]


def _row(result: Any, baseline: Any, names: tuple[str, ...]) -> dict[str, Any]:
    record = report.run_record(result, baseline)
    added = result.metrics.get("memory_added")
    return {
        **record,
        "technique": "+".join(names) or "baseline",
        "added_mb": None if added is None else round(added / 2**20, 1),
    }


def measure(plan: Plan, model: ModelPlan, results: Results) -> list[dict[str, Any]]:
    """Peak memory of each of `configs()` on one model plan, written as it goes."""
    request = base_request(plan, model, steps=plan.memory_steps, batch=plan.memory_batch)
    section = {
        "model": model.model,
        "side": model.side,
        "steps": plan.memory_steps,
        "batch": plan.memory_batch,
        "baseline": baseline_label(request),
    }
    studio = new_studio(plan, f"{model.role}-memory")
    rows: list[dict[str, Any]] = []
    baseline = None
    for names in configs():
        label = "+".join(names) or "baseline"
        why = next((w for w in (reason(plan, request, n) for n in names) if w), None)
        if why or plan.left() < 0:
            rows.append(
                not_run(
                    label, why or "not run: out of time", "unavailable" if why else "skipped", technique=label
                )
            )
            continue
        try:
            configured = configure(request, list(names)) if names else request
            result = studio.generate(configured, warmup=1, rounds=1, baseline=baseline)
        except Exception as exc:  # recorded with its row; the other configurations still run
            log.exception("memory of %s failed", label)
            why = str(exc) if isinstance(exc, StudioError) else f"{type(exc).__name__}: {exc}"
            rows.append(not_run(label, why, "failed", technique=label))
            continue
        baseline = baseline or result
        rows.append(_row(result, baseline if result is not baseline else None, names))
        results.put("memory", model.role, {**section, "rows": rows})
    results.put("memory", model.role, {**section, "rows": rows})
    del studio, baseline
    release(plan)
    return rows
