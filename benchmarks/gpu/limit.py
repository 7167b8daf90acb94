"""The compute-limit section: how far the best configuration is from what the device's arithmetic allows.

- the UNet's FLOPs per call (torch.utils.flop_counter.FlopCounterMode on one call with the inputs the pipeline
  itself gives it: batch 2 with classifier-free guidance), times the calls its scheduler makes for the steps
  (PNDM: steps + 1): FLOPs per image;
- the device's measured matmul peak in the baseline's dtype (best of a few n x n x n matmuls, synchronised);
- FLOPs per image / peak = the seconds an image would take at that peak; the targets section divides them
  by the best measured latency (the fraction of the peak the whole pipeline call reaches).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import torch
from torch.utils.flop_counter import FlopCounterMode

from benchmarks.gpu.common import base_request
from benchmarks.gpu.plan import ModelPlan, Plan
from benchmarks.gpu.results import PEAK, Results
from pipelines.schedulers import denoiser_calls
from studio.engine import Studio
from studio.measure import bench
from studio.optimizations import get
from studio.optimizations.denoiser import denoiser
from studio.request import GenerationRequest

REPEATS = 5


def matmul_peak(device: str, dtype: torch.dtype, n: int, rounds: int = REPEATS) -> float:
    """FLOP/s of the fastest of `rounds` n x n x n matmuls in `dtype` on `device` (after one untimed)."""
    a = torch.randn(n, n, device=device).to(dtype)
    b = torch.randn(n, n, device=device).to(dtype)
    torch.mm(a, b)
    best = float("inf")
    for _ in range(rounds):
        bench.synchronize(device)
        start = time.perf_counter()
        torch.mm(a, b)
        bench.synchronize(device)
        best = min(best, time.perf_counter() - start)
    del a, b
    return 2 * n**3 / best


def denoiser_flops(studio: Studio, request: GenerationRequest) -> tuple[int, int, int]:
    """(FLOPs of one denoiser call, the batch of that call, the denoiser calls in one image of `request`) with
    the inputs of `request`'s own first step and the scheduler it runs with."""
    one_step = dataclasses.replace(request, steps=1)
    captured: list[tuple[tuple, dict]] = []

    def keep(module: torch.nn.Module, args: tuple, kwargs: dict) -> None:
        if not captured:
            captured.append((args, kwargs))

    with studio.manager.acquire(one_step) as prepared:
        model = denoiser(prepared.pipe)
        handle = model.register_forward_pre_hook(keep, with_kwargs=True)
        try:
            bench.run_once(prepared, one_step)
        finally:
            handle.remove()
        args, kwargs = captured[0]
        with torch.no_grad(), FlopCounterMode(display=False) as counter:
            model(*args, **kwargs)
        calls = denoiser_calls(prepared.pipe.scheduler, request.steps)
    sample = args[0] if args else next(iter(kwargs.values()))
    return counter.get_total_flops(), int(sample.shape[0]), calls


def measure_peak(plan: Plan, request: GenerationRequest, results: Results) -> float:
    """The device's matmul peak in the dtype of `request`'s baseline, once per run and dtype."""
    dtype = next((get(o).dtype for o in request.optimizations if get(o).dtype is not None), torch.float32)
    name = str(dtype).removeprefix("torch.")
    known = results.data["compute-limit"].get(f"{PEAK}-{name}", {}).get("tflops")
    if known:
        return known * 1e12
    flops = matmul_peak(plan.device, dtype, plan.matmul_n)
    results.put(
        "compute-limit",
        f"{PEAK}-{name}",
        {"dtype": name, "n": plan.matmul_n, "tflops": round(flops / 1e12, 3)},
    )
    return flops


def measure(plan: Plan, model: ModelPlan, studio: Studio, results: Results) -> dict[str, Any]:
    """The FLOPs of one model plan and the seconds an image would take at the measured peak."""
    request = base_request(plan, model)
    peak = measure_peak(plan, request, results)
    flops, batch, calls = denoiser_flops(studio, request)
    entry = {
        "model": model.model,
        "side": model.side,
        "steps": model.steps,
        "unet_gflops_per_call": round(flops / 1e9, 2),
        "unet_batch": batch,
        "unet_calls": calls,
        "gflops_per_image": round(flops * calls / 1e9, 2),
        "seconds_at_peak": flops * calls / peak,
    }
    results.put("compute-limit", model.role, entry)
    return entry
