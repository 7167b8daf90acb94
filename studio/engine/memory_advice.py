"""What to try when a run does not fit in memory: the registry's memory techniques, ranked by what the
run log measured for this model.

For every memory technique that can run here and combines with what was requested, the advice says
how much it cut the peak memory of this model in logged runs (same device type, same size), and, on a
GPU whose size is known, whether the measured peak with it fits. Techniques never measured on this
model are still listed, after the measured ones, as "not measured yet".
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from studio import devices
from studio.errors import StudioError
from studio.optimizations import REGISTRY, check_conflicts, unavailable_reason
from studio.request import GenerationRequest
from studio.runlog import RunLog

HISTORY_LIMIT = 2000


@dataclass(frozen=True)
class Advice:
    """One technique to retry with, and what the history says about it."""

    name: str
    saving: float | None  # fraction of peak memory saved in logged runs; None when never measured
    peak_bytes: int | None  # median measured peak with it at this size
    fits: bool | None  # on a GPU of known size: does the measured peak fit? None when unknown

    def sentence(self) -> str:
        if self.saving is None:
            return f"{self.name} (not measured yet on this model)"
        fit = (
            ""
            if self.fits is None
            else (", fits this GPU" if self.fits else ", still above this GPU's memory")
        )
        return f"{self.name} (measured {self.saving:+.0%} peak memory on this model at this size{fit})"


def candidates(request: GenerationRequest) -> list[str]:
    """Memory techniques that can run on the request's device and combine with what it asked for."""
    hw = devices.detect()
    names = []
    for opt in REGISTRY.values():
        if opt.group != "memory" or opt.name in request.optimizations:
            continue
        if unavailable_reason(opt, hw, request.device, request.spec.family):
            continue
        try:
            check_conflicts({*request.optimizations, opt.name})
        except StudioError:
            continue
        names.append(opt.name)
    return names


def _peaks(rows: list[dict[str, Any]], want: str | None) -> list[int]:
    return [
        r["peak_memory"]
        for r in rows
        if r.get("peak_memory") and (want in (r["requested"] or ()) if want else not r["requested"])
    ]


def _device_bytes(device: str) -> int | None:
    if not device.startswith("cuda"):
        return None
    hw = devices.detect()
    index = int(device.split(":")[1]) if ":" in device else 0
    return next((g.total_memory for g in hw.gpus if g.index == index), None)


def advise(runlog: RunLog, request: GenerationRequest) -> list[Advice]:
    """Memory techniques to retry `request` with, best measured saving first."""
    device_type = request.device.split(":")[0]
    rows = [
        r
        for r in runlog.runs(model=request.model, status="ok", limit=HISTORY_LIMIT)
        if r["device"].split(":")[0] == device_type
        and (r["width"], r["height"]) == (request.width, request.height)
    ]
    baseline = _peaks(rows, None)
    capacity = _device_bytes(request.device)
    advice = []
    for name in candidates(request):
        with_it = _peaks(rows, name)
        if not with_it or not baseline:
            advice.append(Advice(name, None, None, None))
            continue
        peak = int(statistics.median(with_it))
        saving = 1 - peak / statistics.median(baseline)
        advice.append(Advice(name, saving, peak, None if capacity is None else peak < capacity))
    return sorted(advice, key=lambda a: (a.saving is None, -(a.saving or 0.0)))


def retry_message(advice: list[Advice]) -> str:
    """The sentence appended to an out-of-memory error."""
    if not advice:
        return (
            "No memory technique that combines with this configuration is available here; try a smaller size."
        )
    useful = [a for a in advice if a.saving is None or a.saving > 0] or advice
    flags = " ".join(f"--opt {a.name}" for a in useful[:2])
    return (
        "Memory techniques to retry with: "
        + "; ".join(a.sentence() for a in advice)
        + f". Retry with the first ones (CLI: {flags}; in the studio: the 'Retry with' button)."
    )
