"""The values a run carries through the engine, and the run-log columns built from them.

`Computed` is the compute-only part of a run (plain picklable values: it crosses processes on ZeroGPU and
in a distributed sweep), `Pending` a run logged as `running`, `RunResult` a finished run. `run_columns` is
what the run log knows of a run before it starts, `run_metrics` the figures it is finished with.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from PIL import Image

from studio import devices, phases, settings, visitors
from studio.measure import bench
from studio.measure.host import HostLoad
from studio.request import GenerationRequest


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
    """The columns of a run known before it starts."""
    return {
        "group_id": group_id,
        "config_label": request.config_label,
        "model": request.model,
        "single_file_config": request.spec.single_file_config,
        "vae": request.vae,
        "loras": [a.record() for a in request.loras] or None,
        "device": request.device,
        "hardware": devices.detect().summary(),
        "dtype": request.dtype_name,
        "requested": list(request.optimizations),
        "settings": request.settings,
        "prompt": request.prompt,
        "negative_prompt": request.negative_prompt,
        "seed": request.seed,
        "steps": request.steps,
        "width": request.width,
        "height": request.height,
        "guidance": request.guidance,
        "scheduler": request.scheduler,
        "batch": request.batch,
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
