"""The schedulers a request may name, as diffusers class names: importable without diffusers (validation
checks names with it; the loader resolves the classes)."""

from __future__ import annotations

from typing import Any

# name -> (diffusers scheduler class name, or None for the pipeline's own; config overrides)
SCHEDULERS: dict[str, tuple[str | None, dict[str, Any]]] = {
    "default": (None, {}),
    "ddim": ("DDIMScheduler", {}),
    "euler": ("EulerDiscreteScheduler", {}),
    "euler_a": ("EulerAncestralDiscreteScheduler", {}),
    "dpmpp_2m": ("DPMSolverMultistepScheduler", {"algorithm_type": "dpmsolver++"}),
    "unipc": ("UniPCMultistepScheduler", {}),
    "pndm": ("PNDMScheduler", {}),
    "lms": ("LMSDiscreteScheduler", {}),
}

# name -> the sampler's name in AUTOMATIC1111's `parameters` text (what its users read and paste)
A1111_SAMPLERS: dict[str, str] = {
    "ddim": "DDIM",
    "euler": "Euler",
    "euler_a": "Euler a",
    "dpmpp_2m": "DPM++ 2M",
    "unipc": "UniPC",
    "pndm": "PLMS",
    "lms": "LMS",
}
