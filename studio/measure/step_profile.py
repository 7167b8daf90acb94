"""Where the time of one denoising step goes: operators by kind, FLOPs, and the device's matmul peak.

`profile_step(manager, request)` runs the request's pipeline as the manager prepares it for a generate
(techniques applied, call contexts entered, step hooks run) with a step callback that starts
`torch.profiler` after the first step (the warm one) and stops it after the second: the profile is exactly
step 2. The third step, when the request has one, is timed without the profiler (the profiler's own cost
shows as the difference); the pipeline is then interrupted and its latents returned undecoded.

Time is each operator's self time: CPU time on a CPU, the time of the kernels it launched on a GPU. Time
outside any operator (Python, dispatch and launches; on a GPU the time it sat idle) is the `overhead` kind,
so the kinds add up to the profiled step's wall time. FLOPs are the profiler's (`with_flops`: convolutions,
matmuls, element-wise add and mul, the formulas `torch.utils.flop_counter` uses) plus scaled-dot-product
attention from its recorded shapes (`flop_counter.sdpa_flop_count`; the profiler does not count it).
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.profiler import ProfilerActivity

from studio.errors import OutOfMemory, RunFailed
from studio.measure import bench
from studio.measure.op_kinds import CLASSIFIER, KINDS, OpStat, classify, op_stats, split_by_kind
from studio.optimizations import call_contexts
from studio.request import GenerationRequest

__all__ = [
    "CLASSIFIER",
    "KINDS",
    "ProfileResult",
    "classify",
    "matmul_peak",
    "profile_step",
]

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
PEAK_SIZE = {"cpu": 2048, "cuda": 8192}
TOP = 15
_peaks: dict[tuple, float] = {}


@dataclass
class ProfileResult:
    """One profiled denoising step: its time by kind and by operator, FLOPs, and the device's peak."""

    model: str
    config: str
    applied: tuple[str, ...]
    device: str
    dtype: str
    width: int
    height: int
    batch: int
    steps: int
    step_s: float  # wall time of the profiled step (the kinds add up to it)
    unprofiled_step_s: float | None  # the next step without the profiler, when there is one
    by_kind: dict[str, float]
    ops: list[OpStat]
    flops: int
    peak_flops_per_s: float | None
    peak_note: str
    flops_source: str = "torch.profiler with_flops, plus SDPA from its recorded shapes"
    notes: list[str] = field(default_factory=list)

    @property
    def on_device(self) -> bool:
        """Whether operator times are device (kernel) times rather than CPU times."""
        return self.device.startswith("cuda")

    @property
    def achieved_flops_per_s(self) -> float | None:
        """FLOPs over the step's time without the profiler when measured, else the profiled step's."""
        seconds = self.unprofiled_step_s or self.step_s
        return self.flops / seconds if self.flops and seconds > 0 else None

    @property
    def peak_fraction(self) -> float | None:
        achieved, peak = self.achieved_flops_per_s, self.peak_flops_per_s
        return achieved / peak if achieved is not None and peak else None

    @property
    def dominant(self) -> str:
        return max(self.by_kind, key=lambda k: self.by_kind[k])

    def op_seconds(self, op: OpStat) -> float:
        return op.self_device_s if self.on_device else op.self_cpu_s

    def as_json(self, top: int = TOP) -> dict[str, Any]:
        """The figures as plain JSON values (what the run log stores, the API and `--json` return)."""
        total = sum(self.by_kind.values()) or 1.0
        ops = sorted(self.ops, key=self.op_seconds, reverse=True)[:top]
        return {
            "model": self.model,
            "config": self.config,
            "applied": list(self.applied),
            "device": self.device,
            "dtype": self.dtype,
            "width": self.width,
            "height": self.height,
            "batch": self.batch,
            "steps": self.steps,
            "profiled_step": 2,
            "time_basis": "device (kernel) self time" if self.on_device else "CPU self time",
            "step_s": round(self.step_s, 6),
            "unprofiled_step_s": None if self.unprofiled_step_s is None else round(self.unprofiled_step_s, 6),
            "kinds": [
                {
                    "kind": k,
                    "label": KINDS[k],
                    "seconds": round(s, 6),
                    "share": round(s / total, 4),
                    "flops": sum(op.flops for op in self.ops if op.kind == k),
                }
                for k, s in self.by_kind.items()
            ],
            "dominant": self.dominant,
            "top_ops": [
                {
                    "name": op.name,
                    "kind": op.kind,
                    "calls": op.calls,
                    "self_cpu_s": round(op.self_cpu_s, 6),
                    "self_cuda_s": round(op.self_device_s, 6) if self.on_device else None,
                    "share": round(self.op_seconds(op) / total, 4),
                    "flops": op.flops,
                }
                for op in ops
            ],
            "flops": self.flops,
            "flops_source": self.flops_source,
            "achieved_flops_per_s": _round(self.achieved_flops_per_s),
            "achieved_over": "step 3, timed without the profiler"
            if self.unprofiled_step_s
            else "the profiled step",
            "peak_flops_per_s": _round(self.peak_flops_per_s),
            "peak_fraction": None if self.peak_fraction is None else round(self.peak_fraction, 4),
            "peak_note": self.peak_note,
            "notes": list(self.notes),
        }


def _round(value: float | None) -> float | None:
    return None if value is None else float(f"{value:.4g}")


def matmul_peak(device: str, dtype: torch.dtype, size: int | None = None, rounds: int = 3) -> float | None:
    """The FLOP/s of a square matmul big enough to saturate `device` (best of `rounds`, synchronised),
    measured once per process, device, dtype and CPU thread count; None when the device cannot do it."""
    key = (device, dtype, torch.get_num_threads() if device == "cpu" else None, size)
    if key not in _peaks:
        n = size or PEAK_SIZE.get(device.split(":")[0], 4096)
        try:
            a = torch.randn(n, n, device=device).to(dtype)
            b = torch.randn(n, n, device=device).to(dtype)
            a @ b  # warm: kernel selection, allocator
            best = math.inf
            for _ in range(rounds):
                bench.synchronize(device)
                start = time.perf_counter()
                a @ b
                bench.synchronize(device)
                best = min(best, time.perf_counter() - start)
        except RuntimeError:  # no matmul kernel for this dtype here
            return None
        _peaks[key] = 2 * n**3 / best
    return _peaks[key]


def activities(device: str) -> list[ProfilerActivity]:
    """What the profiler records: CPU operators, and the kernels they launch on a CUDA device."""
    return [ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if device.startswith("cuda") else [])]


KINETO_INIT_LINE = b"External init callback must run in same thread as registerClient"
_kineto = {"initialised": False, "lock": threading.Lock()}


@contextlib.contextmanager
def kineto_init_line_dropped() -> Iterator[None]:
    """Around the process's first profiler start: drop the one line Kineto prints to stderr when that start
    is on a thread other than the one that loaded torch, and keep everything else written meanwhile.

    Why not end it instead: Kineto registers torch's client on the thread that loads torch (the main one)
    and runs the client's init callback on the first profiling session's thread; on any other it skips the
    callback and prints "ERROR: External init callback must run in same thread as registerClient". Torch's
    callback does nothing (`LibKinetoClient::init` is empty), so the profile is the same, but a server runs
    requests on worker threads. Starting a first session on the main thread at startup would end it, at the
    price of Kineto's start/stop lines in every process that imports the engine (CLI commands included).
    """
    with _kineto["lock"]:
        if _kineto["initialised"] or threading.current_thread() is threading.main_thread():
            _kineto["initialised"] = True
            yield
            return
        sys.stderr.flush()
        saved = os.dup(2)
        with tempfile.TemporaryFile() as caught:
            os.dup2(caught.fileno(), 2)
            try:
                yield
            finally:
                os.dup2(saved, 2)
                os.close(saved)
                _kineto["initialised"] = True
                caught.seek(0)
                kept = [line for line in caught.read().splitlines(True) if KINETO_INIT_LINE not in line]
                os.write(2, b"".join(kept))


class StepWindow:
    """The step callback that profiles step 2 and times step 3 without the profiler."""

    def __init__(self, prepared: Any, profiler: Any):
        self.prepared, self.profiler = prepared, profiler
        self.device = prepared.ctx.device
        self.hooks = [o.step_end for o in prepared.call_opts if o.step_end is not None]
        self.started = self.stopped = self.plain_start = 0.0
        self.wall_s: float | None = None
        self.plain_s: float | None = None

    def __call__(self, pipe: Any, i: int, t: Any, kwargs: dict) -> dict:
        for hook in self.hooks:  # the techniques' own step hooks first: they belong to the step
            kwargs = hook(pipe, i, self.prepared.ctx, kwargs)
        bench.synchronize(self.device)
        if i == 0:
            with kineto_init_line_dropped():
                self.profiler.start()
            self.started = time.perf_counter()
        elif i == 1:
            self.wall_s = time.perf_counter() - self.started
            self.stop()
            self.plain_start = time.perf_counter()
        elif i == 2:
            self.plain_s = time.perf_counter() - self.plain_start
            pipe._interrupt = True  # the rest of the steps are not needed
        return kwargs

    def stop(self) -> None:
        if self.started and not self.stopped:
            self.profiler.stop()
            self.stopped = time.perf_counter()


def _profile_call(prepared: Any, request: GenerationRequest) -> tuple[StepWindow, Any]:
    profiler = torch.profiler.profile(
        activities=activities(prepared.ctx.device), record_shapes=True, with_flops=True
    )
    window = StepWindow(prepared, profiler)
    kwargs = {**bench.call_kwargs(request), "output_type": "latent", "callback_on_step_end": window}
    kwargs.update(bench.step_tensor_inputs(prepared))
    try:
        with call_contexts(prepared.call_opts, prepared.ctx):
            prepared.pipe(**kwargs)
    except torch.OutOfMemoryError as exc:
        bench.release_memory(prepared.ctx.device)
        raise OutOfMemory(f"Out of memory on {prepared.ctx.device} ({str(exc).splitlines()[0]}).") from exc
    finally:
        window.stop()
        prepared.pipe._interrupt = False
    if window.wall_s is None:
        raise RunFailed(
            "The pipeline did not report its steps (callback_on_step_end), so no step was profiled."
        )
    return window, profiler


def _peak(request: GenerationRequest) -> tuple[float | None, str]:
    """The device's measured matmul peak for the request's dtype, and how it was measured."""
    device = request.device
    n = PEAK_SIZE.get(device.split(":")[0], 4096)
    count = torch.get_num_threads()
    threads = f", {count} thread{'s' if count > 1 else ''}" if device == "cpu" else ""
    peak = matmul_peak(device, DTYPES.get(request.dtype_name, torch.float32), n)
    return peak, f"best of 3 {n}×{n} {request.dtype_name} matmuls on {device}{threads}"


def profile_step(manager: Any, request: GenerationRequest) -> ProfileResult:
    """Profile step 2 of `request` on the pipeline `manager` prepares for it (see the module's docstring).

    `request` has been checked for a profile (`Studio.profile`: at least 2 steps, the first warms up).

    Raises:
        OutOfMemory, RunFailed: as a generate would.
    """
    with manager.acquire(request) as prepared:
        window, profiler = _profile_call(prepared, request)
        applied = prepared.applied
    ops, busy_s = op_stats(profiler.events())
    peak, peak_note = _peak(request)
    result = ProfileResult(
        model=request.model,
        config=request.config_label,
        applied=applied,
        device=request.device,
        dtype=request.dtype_name,
        width=request.width,
        height=request.height,
        batch=request.batch,
        steps=request.steps,
        step_s=window.wall_s,
        unprofiled_step_s=window.plain_s,
        by_kind=split_by_kind(ops, window.wall_s, request.device.startswith("cuda"), busy_s),
        ops=ops,
        flops=sum(op.flops for op in ops),
        peak_flops_per_s=peak,
        peak_note=peak_note,
    )
    if not result.flops:
        result.notes.append(
            "The profiler counted no FLOPs: the model runs outside the operators it counts (a compiled, "
            "traced or OpenVINO model, or quantized kernels)."
        )
    return result
