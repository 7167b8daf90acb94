"""Memory techniques: VAE slicing/tiling, CPU offload, device maps across GPUs.

diffusers 0.42 removed `pipe.enable_vae_slicing()`; the VAE's own
`enable_slicing()` / `enable_tiling()` are used. Offload and device maps place
modules themselves, so the manager does not `.to(device)` a pipeline using them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from studio.errors import ValidationError
from studio.optimizations.base import Context, Optimization, Settings, register
from studio.optimizations.facts import DEFAULTS_ONLY, MemoryEffect, Preset


def _vae_switch(method: str):
    def switch(pipe: Any, ctx: Context) -> None:
        getattr(pipe.vae, method)()

    return switch


def _offload(kind: str):
    def apply(pipe: Any, ctx: Context) -> None:
        getattr(pipe, f"enable_{kind}_cpu_offload")(device=ctx.device)

    return apply


def _remove_hooks(pipe: Any, ctx: Context) -> None:
    pipe.remove_all_hooks()


def _reset_device_map(pipe: Any, ctx: Context) -> None:
    if getattr(pipe, "hf_device_map", None) is not None:
        pipe.reset_device_map()


def parse_max_memory(value: Any) -> dict[int | str, str]:
    """'0=4GB,1=4GB,cpu=16GB' or a mapping -> {0: '4GB', 1: '4GB', 'cpu': '16GB'}."""
    if isinstance(value, str):
        pairs = [p.split("=", 1) for p in value.split(",") if p.strip()]
        if any(len(p) != 2 for p in pairs):
            raise ValidationError("max_memory must look like '0=4GB,1=4GB,cpu=16GB'.")
        value = {k.strip(): v.strip() for k, v in pairs}
    if not isinstance(value, dict) or not value:
        raise ValidationError("max_memory must map devices to sizes, e.g. {0: '4GB', 'cpu': '16GB'}.")
    out: dict[int | str, str] = {}
    for key, size in value.items():
        key = int(key) if str(key).isdigit() else str(key)
        if key not in ("cpu", "mps") and not isinstance(key, int):
            raise ValidationError(f"max_memory device {key!r} must be a GPU index or 'cpu'.")
        if not re.fullmatch(r"\d+(\.\d+)?\s*(GB|GiB|MB|MiB|KB|KiB)", str(size)):
            raise ValidationError(f"max_memory size {size!r} must look like '4GB' or '512MiB'.")
        out[key] = str(size)
    return out


@dataclass(frozen=True)
class DeviceMapSettings(Settings):
    """`max_memory`: a cap per device, '0=4GB,1=4GB,cpu=16GB' or a mapping; none by default."""

    max_memory: Any = None

    def __post_init__(self) -> None:
        if self.max_memory is not None:
            self._set("max_memory", parse_max_memory(self.max_memory))


register(
    Optimization(
        name="vae_slicing",
        label="VAE slicing",
        group="memory",
        description="Decode a batch of latents one image at a time: lower peak memory for batches.",
        apply=_vae_switch("enable_slicing"),
        revert=_vae_switch("disable_slicing"),
        order=30,
        autotune="excluded",  # memory only
        grid=DEFAULTS_ONLY,
        presets=(Preset(130, ("vae_slicing",)),),
        ladder_rung=None,
        memory_effect=MemoryEffect(decodes="one_image", remedy=True),
    )
)
register(
    Optimization(
        name="vae_tiling",
        label="VAE tiling",
        group="memory",
        description="Decode large images in overlapping tiles: much lower peak memory at high resolution.",
        apply=_vae_switch("enable_tiling"),
        revert=_vae_switch("disable_tiling"),
        order=30,
        autotune="excluded",  # memory only
        grid=DEFAULTS_ONLY,
        presets=(Preset(140, ("vae_tiling",)),),
        ladder_rung=None,
        memory_effect=MemoryEffect(decodes="one_tile", remedy=True),
    )
)
register(
    Optimization(
        name="model_cpu_offload",
        label="model CPU offload",
        group="memory",
        description="Keep each model on the CPU and move it to the GPU only while it runs.",
        requires=("accelerator",),
        conflict_reason="each one decides where the weights live between calls; one at a time",
        conflict_reasons={
            "jit_trace_unet": "a traced UNet keeps its weights where it was traced",
            "torch_compile": "a compiled UNet keeps its weights where it was compiled",
        },
        conflicts=("sequential_cpu_offload", "device_map_balanced", "jit_trace_unet", "torch_compile"),
        reversible=False,
        places_modules=True,
        apply=_offload("model"),
        revert=_remove_hooks,
        order=90,
        autotune="excluded",  # placement: trades speed for memory by design
        grid=DEFAULTS_ONLY,
        presets=(),
        ladder_rung=None,
        memory_effect=MemoryEffect(gpu_weights="largest_model", remedy=True),
    )
)
register(
    Optimization(
        name="sequential_cpu_offload",
        label="sequential CPU offload",
        group="memory",
        description="Stream each layer's weights to the GPU as it runs: smallest GPU memory, very slow.",
        requires=("accelerator",),
        conflict_reason="each one decides where the weights live between calls; one at a time",
        conflict_reasons={
            "jit_trace_unet": "a traced UNet keeps its weights where it was traced",
            "torch_compile": "a compiled UNet keeps its weights where it was compiled",
        },
        conflicts=("model_cpu_offload", "device_map_balanced", "jit_trace_unet", "torch_compile"),
        reversible=False,
        places_modules=True,
        apply=_offload("sequential"),
        revert=_remove_hooks,
        order=90,
        autotune="excluded",  # placement: trades speed for memory by design
        grid=DEFAULTS_ONLY,
        presets=(),
        ladder_rung=None,
        memory_effect=MemoryEffect(gpu_weights="one_layer", remedy=True),
    )
)
register(
    Optimization(
        name="device_map_balanced",
        label="device map (balanced)",
        group="memory",
        description=(
            "Spread the pipeline's models over all GPUs (device_map='balanced'), optionally capped per "
            "device with max_memory."
        ),
        stage="load",
        requires=("cuda",),
        conflict_reason="each one decides where the weights live between calls; one at a time",
        conflicts=("model_cpu_offload", "sequential_cpu_offload"),
        reversible=False,
        places_modules=True,
        revert=_reset_device_map,
        settings=DeviceMapSettings,
        order=0,
        autotune="excluded",  # placement: trades speed for memory by design
        grid=DEFAULTS_ONLY,
        presets=(),
        ladder_rung=None,
        memory_effect=MemoryEffect(gpu_weights="split_over_gpus"),
    )
)
