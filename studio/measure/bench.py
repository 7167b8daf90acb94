"""The timing protocol: warm-up, timed rounds, synchronisation, peak memory, per-step times.

Warm-up runs are excluded from the statistics and reported on their own (the first
call after a trace or compile pays for it there). Each timed run synchronises the
device before the clock is read, and its peak memory is reset before it starts.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import torch

from studio.errors import Cancelled, OutOfMemory, RunFailed
from studio.measure.memory_probe import PeakMemory, weight_bytes
from studio.optimizations import call_contexts
from studio.request import GenerationRequest


class Prepared(Protocol):
    """What a measurement needs of a configured pipeline (the manager's `Prepared` is one): the pipeline, the
    context its techniques were applied in, and the techniques that act around or during the call."""

    pipe: Any
    ctx: Any
    call_opts: list[Any]


StepFn = Callable[[int, int], None]
StopFn = Callable[[], bool | str | None]  # truthy stops the run; a string says why


@dataclass
class Timing:
    """One pipeline call: its wall time, step times, peak memory and images."""

    seconds: float
    step_seconds: list[float]
    peak_memory: int
    memory_added: int
    images: np.ndarray
    memory_resident: int = 0  # the pipeline's own weights on the device when the call started


@dataclass
class Measurement:
    """Statistics over the timed rounds; warm-ups are kept apart."""

    runs: list[Timing]
    warmups: list[float] = field(default_factory=list)
    memory_kind: str = "cpu_rss"

    @property
    def latencies(self) -> list[float]:
        return [r.seconds for r in self.runs]

    @property
    def median(self) -> float:
        return statistics.median(self.latencies)

    @property
    def spread(self) -> float:
        return max(self.latencies) - min(self.latencies)

    @property
    def peak_memory(self) -> int:
        return max(r.peak_memory for r in self.runs)

    @property
    def memory_added(self) -> int:
        return max(r.memory_added for r in self.runs)

    @property
    def images(self) -> np.ndarray:
        return self.runs[-1].images

    @property
    def step_seconds(self) -> list[float]:
        return self.runs[-1].step_seconds

    def summary(self) -> dict[str, Any]:
        lat = self.latencies
        return {
            "latency_s": self.median,
            "latency_min": min(lat),
            "latency_max": max(lat),
            "latency_all": lat,
            "warmup_seconds": self.warmups,
            "first_call_seconds": self.warmups[0] if self.warmups else None,
            "step_median": statistics.median(self.step_seconds) if self.step_seconds else None,
            "peak_memory": self.peak_memory,
            "memory_added": self.memory_added,
            "memory_added_all": [r.memory_added for r in self.runs],
            "memory_resident": self.runs[-1].memory_resident,
            "memory_kind": self.memory_kind,
        }


def synchronize(device: str) -> None:
    """Wait for queued device work so that a clock read means the work is done."""
    if device.startswith("cuda"):
        torch.cuda.synchronize(device)
    elif device == "mps":
        torch.mps.synchronize()


def call_kwargs(request: GenerationRequest) -> dict[str, Any]:
    """The diffusers call arguments for a request (a CPU generator keeps seeds portable), with the model's own
    (`PipelineSpec.call_kwargs`)."""
    return {
        "prompt": request.prompt,
        "negative_prompt": request.negative_prompt or None,
        "num_inference_steps": request.steps,
        "guidance_scale": request.guidance,
        "width": request.width,
        "height": request.height,
        "num_images_per_prompt": request.batch,
        "generator": torch.Generator("cpu").manual_seed(request.seed),
        "output_type": "np",
        **request.spec.call_kwargs,
    }


def step_tensor_inputs(prepared: Prepared) -> dict[str, Any]:
    """`callback_on_step_end_tensor_inputs` for the step hooks of the request's techniques, if any.

    Only the tensors this pipeline class hands to callbacks are asked for (SDXL has pooled
    text embeddings and time ids, SD 1.5 does not).
    """
    allowed = list(getattr(prepared.pipe, "_callback_tensor_inputs", ["latents"]))
    wanted = [n for o in prepared.call_opts if o.step_end is not None for n in o.step_tensors if n in allowed]
    if not wanted:
        return {}
    return {"callback_on_step_end_tensor_inputs": list(dict.fromkeys(["latents", *wanted]))}


def _step_callback(
    marks: list[float],
    total: int,
    on_step: StepFn | None,
    should_stop: StopFn | None,
    reasons: list[str],
    prepared: Prepared,
):
    hooks = [o.step_end for o in prepared.call_opts if o.step_end is not None]

    def callback(pipe: Any, i: int, t: Any, kwargs: dict) -> dict:
        for hook in hooks:
            kwargs = hook(pipe, i, prepared.ctx, kwargs)
        marks.append(time.perf_counter())
        if on_step is not None:  # of the denoiser's calls this run makes (PNDM: steps + 1)
            timesteps = getattr(pipe.scheduler, "timesteps", None)
            on_step(i + 1, max(total, len(timesteps) if timesteps is not None else 0))
        stop = should_stop() if should_stop is not None else None
        if stop:
            reasons.append(stop if isinstance(stop, str) else "")
            pipe._interrupt = True
        return kwargs

    return callback


def run_once(
    prepared: Prepared,
    request: GenerationRequest,
    on_step: StepFn | None = None,
    should_stop: StopFn | None = None,
) -> Timing:
    """One synchronised, memory-measured pipeline call.

    Raises:
        Cancelled: `should_stop` returned something truthy during the run (a string is the reason).
        RunFailed: out of memory, or the output contains NaN.
    """
    marks: list[float] = []
    reasons: list[str] = []
    kwargs = call_kwargs(request)
    kwargs["callback_on_step_end"] = _step_callback(
        marks,
        request.steps,
        on_step=on_step,
        should_stop=should_stop,
        reasons=reasons,
        prepared=prepared,
    )
    kwargs.update(step_tensor_inputs(prepared))
    device = prepared.ctx.device
    resident = weight_bytes(prepared.pipe, device)
    try:
        with PeakMemory(device) as mem, call_contexts(prepared.call_opts, prepared.ctx):
            synchronize(device)
            start = time.perf_counter()
            images = prepared.pipe(**kwargs).images
            synchronize(device)
            seconds = time.perf_counter() - start
    except torch.OutOfMemoryError as exc:
        release_memory(device)
        raise OutOfMemory(f"Out of memory on {device} ({str(exc).splitlines()[0]}).") from exc
    if getattr(prepared.pipe, "_interrupt", False):
        prepared.pipe._interrupt = False
        why = f" ({reasons[0]})" if reasons and reasons[0] else ""
        raise Cancelled(f"Cancelled after {len(marks)} of {request.steps} steps{why}.")
    images = np.asarray(images, dtype=np.float32)
    if not np.isfinite(images).all():
        raise RunFailed(
            "The output contains NaN or infinite values (often fp16 overflow in the VAE). "
            "Try bf16 or fp32 instead of fp16."
        )
    steps = np.diff([start, *marks]).tolist()
    return Timing(
        seconds=seconds,
        step_seconds=steps,
        peak_memory=mem.peak,
        memory_added=mem.added,
        images=images,
        memory_resident=resident,
    )


def release_memory(device: str) -> None:
    """Give cached allocator memory back after a failure."""
    gc.collect()
    if device.startswith("cuda"):
        torch.cuda.empty_cache()


def measure(
    prepared: Prepared,
    request: GenerationRequest,
    warmup: int = 0,
    rounds: int = 1,
    on_step: StepFn | None = None,
    should_stop: StopFn | None = None,
) -> Measurement:
    """Run `warmup` untimed calls, then `rounds` timed ones (at least one)."""
    warm = [run_once(prepared, request, should_stop=should_stop).seconds for _ in range(warmup)]
    runs = [run_once(prepared, request, on_step, should_stop) for _ in range(max(1, rounds))]
    kind = "cuda_allocated" if prepared.ctx.device.startswith("cuda") else "cpu_rss"
    return Measurement(runs=runs, warmups=warm, memory_kind=kind)
