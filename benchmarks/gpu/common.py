"""What every section shares: a studio of its own in the work folder, the baseline request of a model plan,
and giving the device's memory back between sections."""

from __future__ import annotations

import copy
import gc
import itertools
from typing import Any

import torch

from benchmarks.gpu.plan import ModelPlan, Plan
from pipelines import loader
from studio.engine import Studio
from studio.manager import PipelineManager
from studio.measure.bench import release_memory
from studio.optimizations import REGISTRY
from studio.request import GenerationRequest, build_request

_studios = itertools.count(1)
CPU_ONLY = frozenset({"cpu", "cpu-x86"})


class SharedLoads:
    """The loader of every section's pipeline manager: it builds (or reads) each pipeline once, on the CPU,
    and hands each manager a copy of its own. A random-weight SDXL takes tens of seconds to build; a copy,
    seconds. Pipelines loaded with a device map are not kept (their modules are already on the GPU)."""

    def __init__(self) -> None:
        self._pipes: dict[tuple, Any] = {}

    def __call__(self, spec: Any, dtype: torch.dtype = torch.float32, **options: Any) -> Any:
        if options.get("device_map"):
            return loader.load(spec, dtype=dtype, **options)
        key = (spec.id, dtype, repr(sorted(options.items(), key=str)))
        if key not in self._pipes:
            self._pipes[key] = loader.load(spec, dtype=dtype, **options)
        return copy.deepcopy(self._pipes[key])

    def forget(self) -> None:
        """Drop the kept pipelines (when the benchmark moves on to another model)."""
        self._pipes.clear()


LOADS = SharedLoads()


def new_studio(plan: Plan, name: str) -> Studio:
    """A studio with its own run log, images and pipeline cache under the work folder."""
    home = plan.work / f"{next(_studios):02d}-{name}"
    manager = PipelineManager(load=LOADS, max_pipelines=4)
    return Studio(db_path=home / "runs.db", outputs=home / "images", manager=manager)


def base_request(plan: Plan, model: ModelPlan, **changes: Any) -> GenerationRequest:
    """The model plan's baseline request (its own precision on a GPU: fp16, bf16; fp32 in the dry run), with
    `changes` (steps, batch)."""
    args = {
        "model": model.model,
        "prompt": plan.prompt,
        "seed": plan.seed,
        "steps": model.steps,
        "width": model.side,
        "height": model.side,
        "device": plan.device,
        "optimizations": list(model.baseline) if plan.own_precision else [],
        **changes,
    }
    return build_request(**args)


def baseline_label(request: GenerationRequest) -> str:
    """The baseline's configuration as the report names it ('fp16'; 'fp32' when it has no technique)."""
    return request.config_label if request.optimizations else "fp32"


def cpu_only(name: str) -> str | None:
    """Why a technique is not measured on a GPU at all (it runs on the CPU only), or None."""
    if CPU_ONLY & set(REGISTRY[name].requires):
        return f"{name} runs on the CPU only: not a GPU technique."
    return None


def release(plan: Plan) -> None:
    """Give the memory of pipelines no longer referenced back to the device (between sections)."""
    gc.collect()
    release_memory(plan.device)
