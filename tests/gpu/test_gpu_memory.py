"""Memory on the GPU: the CUDA allocator's peak probe, a run's reported peak, and the CPU offloads, which must
run and, once removed, leave the pipeline on the GPU giving back the baseline's image."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from studio.manager import PipelineManager
from studio.measure.memory_probe import PeakMemory
from studio.measure.quality import max_abs_diff
from tests.tiny import request, run

DEVICE = "cuda:0"
MIB = 2**20
pytestmark = pytest.mark.gpu


def test_the_cuda_peak_probe_sees_an_allocation():
    with PeakMemory(DEVICE) as mem:
        block = torch.empty(64 * MIB, dtype=torch.uint8, device=DEVICE)
        del block
    assert mem.kind == "cuda_allocated"
    assert mem.peak >= 64 * MIB and mem.added >= 64 * MIB


def test_a_run_on_cuda_reports_its_allocator_peak(studio):
    result = studio.generate(request(["fp16"], steps=2, device=DEVICE))
    assert result.metrics["memory_kind"] == "cuda_allocated"
    assert result.metrics["peak_memory"] > 0


@pytest.mark.parametrize("name", ["model_cpu_offload", "sequential_cpu_offload"])
def test_offload_runs_then_the_pipeline_is_back_on_the_gpu(name):
    manager = PipelineManager()
    base = request(["fp16"], steps=4, device=DEVICE)
    before = run(manager, base)[0]
    images, _ = run(manager, request(["fp16", name], steps=4, device=DEVICE))
    assert np.isfinite(images).all() and max_abs_diff(images, before) <= 0.05
    after, prepared = run(manager, base)
    where = next(prepared.pipe.unet.parameters()).device
    assert where.type == "cuda", f"after removing {name} the baseline ran with its UNet on {where}"
    assert np.array_equal(after, before), f"removing {name} did not give back the baseline's image"
