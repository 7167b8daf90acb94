"""The environment section: the GPU, its driver, torch and CUDA, the libraries, what the kit carried and which
techniques can run on the benchmark's device here (with the reason for the others)."""

from __future__ import annotations

import platform
import shutil
import subprocess
from typing import Any

import torch

from benchmarks.gpu.kit import read_kit, unmet_requirements, xformers_note
from studio import devices, settings
from studio.optimizations import REGISTRY, unavailable_reason

SMI_FIELDS = "name,driver_version,memory.total,power.limit,clocks.max.sm"


def nvidia_smi() -> dict[str, str] | str:
    """The first GPU's name, driver, memory, power limit and top clock from nvidia-smi, or why not."""
    if shutil.which("nvidia-smi") is None:
        return "nvidia-smi is not on PATH"
    done = subprocess.run(
        ["nvidia-smi", f"--query-gpu={SMI_FIELDS}", "--format=csv,noheader"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    if done.returncode:
        return f"nvidia-smi failed: {(done.stderr or done.stdout).strip()[:300]}"
    values = [v.strip() for v in done.stdout.splitlines()[0].split(",")]
    return dict(zip(SMI_FIELDS.split(","), values, strict=False))


def torch_facts() -> dict[str, Any]:
    """torch, its CUDA and cuDNN, and the device it sees."""
    facts: dict[str, Any] = {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "cuda_available": torch.cuda.is_available(),
    }
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        free, total = torch.cuda.mem_get_info(0)
        facts.update(
            gpu=props.name,
            capability=f"{props.major}.{props.minor}",
            memory_gib=round(total / 2**30, 1),
            free_gib=round(free / 2**30, 1),
            multiprocessors=props.multi_processor_count,
        )
    return facts


def techniques_here(device: str, family: str = "sd") -> dict[str, str | None]:
    """Every technique: None when it can run on `device` here, else the registry's reason."""
    hw = devices.detect()
    return {name: unavailable_reason(opt, hw, device, family) for name, opt in REGISTRY.items()}


def collect(device: str) -> dict[str, Any]:
    """The environment section of the results."""
    kit = [r.name for r in read_kit()]
    return {
        "device": device,
        "python": platform.python_version(),
        "nvidia_smi": nvidia_smi(),
        **torch_facts(),
        "versions": settings.versions(),
        "hardware": devices.detect().summary(),
        "kit": kit,
        "requirements_unmet": unmet_requirements(kit),
        "xformers": xformers_note(),
        "techniques_unavailable": {k: v for k, v in techniques_here(device).items() if v},
    }
