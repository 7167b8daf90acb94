"""Every technique that runs on CUDA, applied through the manager to the bundled model on the GPU: it draws
what the fp16 baseline draws within a stated bound, and reverting it gives back exactly the baseline's image.

First run on an NVIDIA H100 (torch 2.11.0+cu130, 2026-11-25): 30 passed, 3 outside the bounds stated before
any GPU had run them, which now carry the measured figures (max-abs / PSNR against the fp16 baseline): bf16
0.659 / 26.2 dB (bf16 keeps 8 mantissa bits where fp16 keeps 11: both roundings show), fp8 0.319 / 34.7 dB,
torch_compile 0.052 / 49.7 dB (inductor fuses fp16 operations and rounds once where eager rounds after each).
The same maths in fp16 in another summation order (kernels, layouts, fused attention) moves pixels far more
than in fp32, hence `EXACT_ON_GPU`; the other lossy techniques keep the CPU table's bounds
(tests/optimizations/test_equivalence.py) with `SLACK` added for fp16; a bound in `GPU_BOUNDS` comes first.
"""

from __future__ import annotations

import numpy as np
import pytest

from studio import devices
from studio.manager import PipelineManager
from studio.measure.quality import max_abs_diff, psnr
from studio.optimizations import REGISTRY, conflicts_of, unavailable_reason
from tests.optimizations.test_equivalence import EQUIVALENCE, STEPS, Bound
from tests.tiny import fidelity, request, run

DEVICE = "cuda:0"
BASELINE = "fp16"
EXACT_ON_GPU = Bound(0.05, 35.0)
SLACK = Bound(0.05, 5.0)  # added to a lossy technique's CPU bound (max-abs up, PSNR down)
CPU_ONLY = {"cpu", "cpu-x86"}
GPU_BOUNDS: dict[str, Bound] = {
    **dict.fromkeys(
        (
            "xformers",
            "tf32",
            "cudnn_benchmark",
            "model_cpu_offload",
            "sequential_cpu_offload",
            "device_map_balanced",
            "group_offload",
            "vae_tiling",  # at 64x64 no tile is cut
        ),
        EXACT_ON_GPU,
    ),
    # measured on an H100 (above), with room for another GPU's kernels
    "torch_compile": Bound(0.1, 42.0),
    "bf16": Bound(0.9, 23.0, lossy=True),
    "fp8": Bound(0.45, 31.0, lossy=True),
}


def for_sd(requires: tuple[str, ...]) -> bool:
    """Whether a technique's family requirement (if any) admits the bundled model's family, sd."""
    return all("sd" in r.removeprefix("family:").split("|") for r in requires if r.startswith("family:"))


def cuda_techniques() -> list[str]:
    """The registry's techniques meant to run on a GPU with the bundled model (not CPU-only, not the
    baseline)."""
    return sorted(
        n
        for n, o in REGISTRY.items()
        if not CPU_ONLY & set(o.requires) and for_sd(o.requires) and n != BASELINE
    )


def gpu_bound(name: str) -> Bound:
    """This file's bound, else the CPU table's (with `SLACK` for the lossy ones)."""
    if name in GPU_BOUNDS:
        return GPU_BOUNDS[name]
    row = EQUIVALENCE.get(name)
    if isinstance(row, Bound):
        return (
            Bound(row.max_abs + SLACK.max_abs, row.min_psnr - SLACK.min_psnr, lossy=True)
            if row.lossy
            else EXACT_ON_GPU
        )
    return EXACT_ON_GPU


def configured(name: str | None = None, steps: int = STEPS):
    """The fp16 baseline on the GPU, with `name` added (replacing the baseline's precision if they clash)."""
    optimizations = [o for o in [BASELINE] if name is None or o not in conflicts_of(name)]
    return request([*optimizations, *([name] if name else [])], steps=steps, device=DEVICE)


def test_every_cuda_technique_has_a_gpu_bound():
    missing = [n for n in cuda_techniques() if n not in GPU_BOUNDS and n not in EQUIVALENCE]
    assert not missing, f"add a GPU bound to tests/gpu/test_gpu_techniques.py for: {', '.join(missing)}"


@pytest.fixture(scope="module")
def manager():
    return PipelineManager()


@pytest.fixture(scope="module")
def baseline(manager):
    return run(manager, configured())[0]


@pytest.mark.gpu
@pytest.mark.parametrize("name", cuda_techniques())
def test_on_cuda_within_its_bound_then_reverts_exactly(manager, baseline, name):
    reason = unavailable_reason(REGISTRY[name], devices.detect(), DEVICE)
    if reason:
        pytest.skip(reason)
    # Techniques that place modules get a manager of their own: what their removal leaves behind is tested in
    # test_gpu_memory.py and must not reach the other techniques' tests.
    own = PipelineManager() if REGISTRY[name].places_modules else manager
    reference = baseline if own is manager else run(own, configured())[0]
    images, prepared = run(own, configured(name))
    assert name in prepared.applied
    bound = gpu_bound(name)
    diff, db = max_abs_diff(images, reference), psnr(images, reference)
    assert diff <= bound.max_abs and db >= bound.min_psnr, (
        f"{name} changed the image by {diff:.2e} ({db:.1f} dB)"
    )
    if bound.lossy:
        assert diff > 0, f"{name} did not change the image: did it engage?"
        assert fidelity(images)["detected"] == fidelity(reference)["detected"], f"{name} changed the picture"
    assert np.array_equal(run(own, configured())[0], reference), (
        f"reverting {name} did not give back the baseline"
    )
