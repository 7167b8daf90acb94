"""What the first call of a configuration costs, said before it runs: from the run log, the first calls this
studio already made of the same model, configuration, device and size.

A first call pays for what later calls reuse: loading, a conversion and its calibration (OpenVINO's int8), a
compile (torch.compile, a traced UNet). The run log records each run's first call (`first_call_seconds`); the
slowest of them is the cold cost, the newest what the caches on this machine give now (an OpenVINO model read
back from its cache, a compile from inductor's). Runs whose techniques prepared something also say which phase
they paid (`studio.phases`: cold, warm or package), so cold, warm and packaged first calls are
said side by side.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from studio import phases
from studio.report import seconds

if TYPE_CHECKING:
    from studio.request import GenerationRequest
    from studio.runlog import RunLog

HISTORY = 200  # runs of the model looked at, newest first
NOTABLE = 1.5  # a first call worth saying before a run: at least this many times a later call of it


@dataclass(frozen=True)
class FirstCall:
    """The first calls logged for one configuration: the slowest (cold) and the newest."""

    config: str
    cold_s: float
    cold_steps: int
    warm_s: float | None  # a later call at the cold one's steps (the median of the logged ones per step)
    latest_s: float
    latest_at: str
    count: int
    by_phase: tuple[tuple[str, float], ...] = ()  # (phase, its newest first call), slowest phase first

    @property
    def notable(self) -> bool:
        return notable(self.cold_s, self.warm_s)

    @property
    def one_off_s(self) -> float | None:
        """What the first call costs beyond a later one (a conversion, a compile), None with no later call
        logged."""
        return None if self.warm_s is None else max(0.0, self.cold_s - self.warm_s)

    def sentence(self) -> str:
        cold = f"{seconds(self.cold_s)} at {self.cold_steps} steps"
        later = f"; later calls {seconds(self.warm_s)}" if self.warm_s is not None else ""
        by_phase = ", ".join(f"{phase} ({phases.MEANING[phase]}) {seconds(s)}" for phase, s in self.by_phase)
        by_phase = f" By phase, the newest first call: {by_phase}." if by_phase else ""
        if self.count == 1:
            return (
                f"The first call of {self.config} took {cold} here ({self.latest_at[:10]}){later}.{by_phase}"
            )
        return (
            f"The first call of {self.config} took up to {cold} here (the slowest of {self.count}; the "
            f"newest, {self.latest_at[:10]}, {seconds(self.latest_s)} with what the caches kept){later}."
            f"{by_phase}"
        )


def notable(first_s: float, later_s: float | None) -> bool:
    """Whether a first call cost clearly more than a later one (a conversion, a compile): worth saying before
    a run; with no later call known, it is said."""
    return later_s is None or first_s >= NOTABLE * later_s


def part_of(request: GenerationRequest, name: str) -> GenerationRequest:
    """`request` with technique `name` alone (its settings kept): one part of a combination, whose own first
    call says what that part adds to the combination's."""
    return replace(
        request, optimizations=(name,), settings={k: v for k, v in request.settings.items() if k == name}
    )


def logged(runlog: RunLog, request: GenerationRequest) -> FirstCall | None:
    """The first calls logged for `request`'s model, configuration, device and size, or None."""
    rows = [
        r
        for r in runlog.runs(model=request.model, device=request.device, status="ok", limit=HISTORY)
        if r.get("config_label") == request.config_label
        and (r.get("width"), r.get("height")) == (request.width, request.height)
    ]
    firsts = [r for r in rows if r.get("first_call_seconds") is not None]
    if not firsts:
        return None
    cold = max(firsts, key=lambda r: r["first_call_seconds"])
    per_step = [  # a Profile run is logged ok without a latency: it timed one step, not a call
        r["latency_s"] / r["steps"]
        for r in rows
        if r.get("first_call_seconds") is None and r.get("latency_s") is not None
    ]
    return FirstCall(
        config=request.config_label,
        cold_s=cold["first_call_seconds"],
        cold_steps=cold["steps"],
        warm_s=statistics.median(per_step) * cold["steps"] if per_step else None,
        latest_s=firsts[0]["first_call_seconds"],
        latest_at=firsts[0]["created_at"],
        count=len(firsts),
        by_phase=tuple(
            (phase, next(r["first_call_seconds"] for r in firsts if r.get("first_call_phase") == phase))
            for phase in phases.ORDER
            if any(r.get("first_call_phase") == phase for r in firsts)
        ),
    )
