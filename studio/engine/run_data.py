"""The values a run carries through the engine, and the run-log columns built from them.

`Computed` is the compute-only part of a run (plain picklable values: it crosses processes on ZeroGPU and
in a distributed sweep), `Pending` a run logged as `running`, `RunResult` a finished run, `ProfileRun` a
finished profile of one step. `run_columns` is what the run log knows of a run before it starts, `run_metrics`
the figures it is finished with, `profile_metrics` a profile's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
from PIL import Image

from studio import devices, phases, settings, visitors
from studio.measure import bench
from studio.measure.host import HostLoad
from studio.request import GenerationRequest

if TYPE_CHECKING:
    from studio.measure.step_profile import ProfileResult


@dataclass
class RunResult:
    """One finished run: ids, images, metrics and quality against the baseline."""

    run_id: int | None  # None when the run log could not be written (see `warnings`)
    request: GenerationRequest
    metrics: dict[str, Any]
    images: list[Image.Image]
    image_paths: list[str]
    arrays: np.ndarray
    quality: dict[str, Any] = field(default_factory=dict)
    applied: tuple[str, ...] = ()
    warnings: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        return self.request.config_label

    @property
    def image_path(self) -> str | None:
        """Where the first image was saved, or None when it could not be written."""
        return self.image_paths[0] if self.image_paths else None


@dataclass
class ProfileRun:
    """A logged profile: its run id (None when the run log could not be written), figures and warnings."""

    run_id: int | None
    result: ProfileResult
    warnings: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        """The record every face returns: the run id, the profile's figures and the warnings."""
        return {"run_id": self.run_id, **self.result.as_json(), "warnings": list(self.warnings)}


@dataclass(frozen=True, kw_only=True)
class RunOptions:
    """How one configuration's compute runs, by name: untimed `warmup` calls, then `rounds` timed ones;
    `on_step(step, steps)` after each denoising step; `should_stop()` polled between steps (a truthy answer
    cancels); the manager `slot` a sweep keeps its copy in; torch's CPU `threads` (None: chosen per run)."""

    warmup: int = 0
    rounds: int = 1
    on_step: Callable[[int, int], None] | None = None
    should_stop: bench.StopFn | None = None
    slot: tuple[str, str] | None = None
    threads: int | None = None


@dataclass
class Computed:
    """The GPU-bound part of a run as plain picklable values (on ZeroGPU it returns from a forked worker)."""

    measured: bench.Measurement
    applied: tuple[str, ...]
    load_seconds: float
    switch_seconds: float
    first_call: bool
    stats: dict[str, Any]
    host: HostLoad | None = None  # how busy the rest of the machine was (set by the caller that timed it)


@dataclass
class Pending:
    """A run logged as `running`: its id (None when the log could not be written) and its warnings so far."""

    run_id: int | None
    request: GenerationRequest
    warnings: list[str] = field(default_factory=list)
    columns: dict[str, Any] = field(default_factory=dict)  # its run-log columns (`run_columns`)


def run_columns(request: GenerationRequest, warmup: int, rounds: int, group_id: int | None) -> dict[str, Any]:
    """The columns of a run known before it starts: its request's (`GenerationRequest.columns`), its group,
    the machine, the visitor, its counts and the library versions."""
    return {
        "group_id": group_id,
        **request.columns(),
        "hardware": devices.detect().summary(),
        "visitor": visitors.current().id,
        "warmup": warmup,
        "rounds": rounds,
        "versions": settings.versions(),
    }


def run_metrics(
    request: GenerationRequest, computed: Computed, extra: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The figures a finished run is logged with: latencies, load and switch times, the pipeline's stats
    and how busy the host was; `extra` holds figures known only to a sweep (speedup and its range, verdict).
    """
    measured, host = computed.measured, computed.host
    metrics = measured.summary()
    if computed.first_call and not measured.warmups:
        metrics["first_call_seconds"] = measured.latencies[0]
    phase, prepare = phases.summary(computed.stats.get("first_call_phases") or [])
    if phase is not None:
        metrics.update(first_call_phase=phase, prepare_seconds=prepare)
    metrics.update(
        load_seconds=computed.load_seconds,
        switch_seconds=computed.switch_seconds,
        step_seconds=measured.step_seconds,
        steps_per_second=request.steps / metrics["latency_s"],
        stats=computed.stats,
        host_busy_pct=None if host is None else host.busy_pct,
        host_steal_pct=None if host is None else host.steal_pct,
        **(extra or {}),
    )
    return metrics


def profile_metrics(result: ProfileResult, host: HostLoad) -> dict[str, Any]:
    """The figures a finished profile is logged with: its step's seconds (timed without the profiler where it
    was), how busy the host was, and the profile itself (the `profile` column)."""
    step = result.unprofiled_step_s or result.step_s
    return {
        "applied": list(result.applied),
        "step_median": step,
        "steps_per_second": 1 / step,
        "host_busy_pct": host.busy_pct,
        "host_steal_pct": host.steal_pct,
        "profile": result.as_json(),
    }
