"""Weight memory of the denoiser through diffusers' hooks: layerwise casting and group offloading.

`layerwise_casting` (`model.enable_layerwise_casting`): the weights of the Linear and convolution layers are
stored in float8 (`storage`) and cast up to the compute dtype for the layer's own forward only; diffusers'
default skip patterns keep norms (with the Linear layers of adaptive norms), embeddings and the input/output
projections as they are, `skip=embeddings` casts the adaptive norms' Linear layers too. diffusers cannot
undo it (its hook refuses to be removed: float8 lost the precision), so the original weights are kept and
put back with the hooks removed: revert is exact. Where they wait is the `originals` setting: "memory" (on an
accelerator a copy in host memory, so the accelerator holds the float8 weights only; on a CPU the same
tensors, so the process's memory does not drop) or "disk" (a file under the studio's home, read back on
revert: on a CPU the only way the process's memory drops); "auto" is disk on a CPU, memory elsewhere.

`group_offload` (`model.enable_group_offload`): groups of layers (`block_level`: `num_blocks_per_group`
blocks; `leaf_level`: each layer) wait in host memory and are moved to the accelerator just before they run.
With `offload_to` "disk" (what "auto" means on a CPU) they wait in safetensors files under the studio's home
instead and are read back group by group: on a CPU that is the only offloading that saves memory. Revert
brings every group back, removes the hooks and the files.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from diffusers.hooks import apply_layerwise_casting

from studio import checks, settings
from studio.optimizations.base import Context, Optimization, Settings, register
from studio.optimizations.denoiser import denoiser
from studio.optimizations.facts import DEFAULTS_ONLY, NO_MEMORY_EFFECT, Preset
from studio.optimizations.hooks import hooked, tidy

CASTING, OFFLOAD = "layerwise_casting", "group_offloading"  # diffusers' hook names
OFFLOAD_HOOKS = (OFFLOAD, "layer_execution_tracker", "lazy_prefetch_group_offloading")
STORAGE = {"fp8_e4m3": torch.float8_e4m3fn, "fp8_e5m2": torch.float8_e5m2}
COMPUTE = {"auto": None, "bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
# `skip`: "default" is diffusers' (its patterns and the model's own, which name "norm": that keeps the Linear
# layers inside adaptive norms, a quarter of Flux's weights, in full precision); "embeddings" keeps only the
# position and patch embeddings and the input/output projections (norm layers themselves are never cast).
EMBEDDINGS = ("pos_embed", "patch_embed", "^proj_in$", "^proj_out$")


@dataclass(frozen=True)
class LayerwiseCastingSettings(Settings):
    """`storage`: fp8_e4m3 or fp8_e5m2; `compute`: the dtype a layer runs in (auto: the model's own); `skip`:
    default (diffusers' patterns) or embeddings (adaptive norms' Linear layers are cast too); `originals`:
    where the full-precision weights wait for revert: memory, disk (under the studio's home) or auto (disk on
    a CPU)."""

    storage: str = "fp8_e4m3"
    compute: str = "auto"
    skip: str = "default"
    originals: str = "auto"

    def __post_init__(self) -> None:
        self._set("storage", checks.one_of("layerwise_casting storage", self.storage, tuple(STORAGE)))
        self._set("compute", checks.one_of("layerwise_casting compute", self.compute, tuple(COMPUTE)))
        self._set("skip", checks.one_of("layerwise_casting skip", self.skip, ("default", "embeddings")))
        where = ("auto", "memory", "disk")
        self._set("originals", checks.one_of("layerwise_casting originals", self.originals, where))


def _originals_on_disk(s: Settings, model: torch.nn.Module) -> bool:
    """Whether the original weights wait on disk: asked for, or auto with the model in CPU memory."""
    on_cpu = all(p.device.type == "cpu" for p in model.parameters())
    return s.originals == "disk" or (s.originals == "auto" and on_cpu)


def _save_originals(model: torch.nn.Module) -> Path:
    """The model's parameters written to a file under the studio's home (torch.save writes each storage as it
    is, without a serialised copy in memory)."""
    path = settings.scratch("casting") / "originals.pt"
    torch.save({name: p.data.to("cpu") for name, p in model.named_parameters()}, path)
    return path


def _load_originals(model: torch.nn.Module, path: Path) -> None:
    weights = torch.load(path, map_location="cpu", weights_only=True)
    params = dict(model.named_parameters())
    for name, data in weights.items():
        params[name].data = data.to(params[name].device)
    shutil.rmtree(path.parent, ignore_errors=True)


def enable_casting(pipe: Any, ctx: Context) -> None:
    """Store the denoiser's layer weights in float8, keeping the originals (memory or disk) for revert."""
    s = ctx.settings("layerwise_casting")
    model = denoiser(pipe)
    compute = COMPUTE[s.compute] or next(model.parameters()).dtype
    if _originals_on_disk(s, model):
        ctx.state[CASTING] = (model, _save_originals(model))
    else:
        host = lambda t: t if t.device.type in ("cpu", "meta") else t.to("cpu")  # noqa: E731 (meta: a shape)
        ctx.state[CASTING] = (model, [(p, host(p.data)) for p in model.parameters()])
    if s.skip == "default":
        model.enable_layerwise_casting(storage_dtype=STORAGE[s.storage], compute_dtype=compute)
    else:
        apply_layerwise_casting(model, STORAGE[s.storage], compute, skip_modules_pattern=EMBEDDINGS)


def disable_casting(pipe: Any, ctx: Context) -> None:
    """Remove the casting hooks (diffusers' own removal refuses) and put the original weights back."""
    saved = ctx.state.pop(CASTING, None)
    if saved is None:
        return
    model, originals = saved
    for module in hooked(model, CASTING):
        hook = module._diffusers_hook.get_hook(CASTING)
        hook.deinitalize_hook = lambda m: m  # the weights come back below, exactly
        module._diffusers_hook.remove_hook(CASTING, recurse=False)
    if isinstance(originals, Path):
        _load_originals(model, originals)
    else:
        for param, data in originals:
            param.data = data.to(param.device)
    tidy(model)


@dataclass(frozen=True)
class GroupOffloadSettings(Settings):
    """`offload_type`: block_level or leaf_level; `num_blocks_per_group` (block_level); `offload_to`: cpu
    (host memory), disk, or auto (cpu on an accelerator, disk on a CPU); `use_stream`: overlap the transfers
    with compute (CUDA streams)."""

    offload_type: str = "block_level"
    num_blocks_per_group: int = 1
    offload_to: str = "auto"
    use_stream: bool = False

    def __post_init__(self) -> None:
        kinds = ("block_level", "leaf_level")
        self._set("offload_type", checks.one_of("group_offload offload_type", self.offload_type, kinds))
        blocks = checks.whole("group_offload num_blocks_per_group", self.num_blocks_per_group, 1, 64)
        self._set("num_blocks_per_group", blocks)
        self._set(
            "offload_to", checks.one_of("group_offload offload_to", self.offload_to, ("auto", "cpu", "disk"))
        )
        self._set("use_stream", checks.boolean("group_offload use_stream", self.use_stream))


def _to_disk(s: Settings, device: str) -> bool:
    return s.offload_to == "disk" or (s.offload_to == "auto" and device.split(":")[0] == "cpu")


def offload_reason(s: Settings, device: str, dtype: str) -> str | None:
    """Why these group_offload settings cannot run on `device`, or None."""
    on_cpu = device.split(":")[0] == "cpu"
    if on_cpu and not _to_disk(s, device):
        return (
            "group_offload offload_to=cpu keeps each group in CPU memory until it runs on the accelerator: "
            "on the CPU there is no other memory to offload to; use offload_to=disk (auto does)."
        )
    if s.use_stream and not device.startswith("cuda"):
        return f"group_offload use_stream=true overlaps transfers with CUDA streams; this run is on {device}."
    return None


def _placeholder(tensor: torch.Tensor) -> torch.Tensor:
    """`tensor`'s shape and dtype on one element of memory (zero strides): what a weight on disk waits as."""
    return torch.empty((), dtype=tensor.dtype, device=tensor.device).expand(tensor.shape)


def _release_when_on_disk(group: Any) -> None:
    """Make `group`'s weights take no memory while they wait on disk. diffusers leaves an uninitialised tensor
    of each weight's full size in its place (`torch.empty_like`), which the allocator serves from the pages
    the weights just freed: on a CPU the process's memory hardly drops. Reading a group back replaces the
    placeholders whatever their size, so a one-element placeholder is enough."""
    offload = group._offload_to_disk

    def release() -> None:
        for tensor in group.tensor_to_key:
            tensor.data = _placeholder(tensor.data)

    group._offload_to_disk = lambda: (offload(), release())
    if group._is_offloaded_to_disk:  # offloaded when the hooks were put on
        release()


def enable_offload(pipe: Any, ctx: Context) -> None:
    """Offload the denoiser's groups to host memory or disk; the other components go to the run's device."""
    s = ctx.settings("group_offload")
    model = denoiser(pipe)
    folder = None
    if _to_disk(s, ctx.device):
        folder = str(settings.scratch("offload"))
    for part in pipe.components.values():
        if isinstance(part, torch.nn.Module):
            part.to("cpu" if part is model else ctx.device)
    model.enable_group_offload(
        onload_device=torch.device(ctx.device),
        offload_device=torch.device("cpu"),
        offload_type=s.offload_type,
        num_blocks_per_group=s.num_blocks_per_group if s.offload_type == "block_level" else None,
        use_stream=s.use_stream,
        offload_to_disk_path=folder,
    )
    if folder is not None:
        for module in hooked(model, OFFLOAD):
            _release_when_on_disk(module._diffusers_hook.get_hook(OFFLOAD).group)
    ctx.state[OFFLOAD] = (model, folder)


def disable_offload(pipe: Any, ctx: Context) -> None:
    """Bring every group back, remove the hooks and the files, and put the denoiser on the run's device."""
    saved = ctx.state.pop(OFFLOAD, None)
    if saved is None:
        return
    model, folder = saved
    for module in hooked(model, OFFLOAD):
        group = module._diffusers_hook.get_hook(OFFLOAD).group
        if group.offload_to_disk_path is not None:
            group.onload_()  # the weights back from their file, then into torch's own (aligned) allocations
            for tensor in group.tensor_to_key:
                tensor.data = tensor.data.clone()
    registry = model._diffusers_hook
    for name in OFFLOAD_HOOKS:
        registry.remove_hook(name, recurse=True)
    tidy(model)
    model.to(ctx.device)
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)


register(
    Optimization(
        name="layerwise_casting",
        label="layerwise casting (fp8 storage)",
        group="memory",
        description=(
            "Store the denoiser's Linear and convolution weights in float8 and cast each layer up to the "
            "compute dtype only while it runs (diffusers' enable_layerwise_casting): about half a bf16 "
            "model's weight memory; the image changes a little."
        ),
        conflict_reason=(
            "it stores the weights in fp8 and casts each layer up with hooks at call time, which quantized "
            "weights, a traced UNet and OpenVINO's converted model never run"
        ),
        conflicts=("jit_trace_unet", "int8_dynamic", "int8_weight_only", "fp8", "openvino", "int8_static"),
        apply=enable_casting,
        revert=disable_casting,
        settings=LayerwiseCastingSettings,
        order=55,
        autotune="excluded",  # trades speed for memory by design
        grid=DEFAULTS_ONLY,
        presets=(Preset(120, ("layerwise_casting",)),),
        ladder_rung=None,
        memory_effect=NO_MEMORY_EFFECT,
    )
)
register(
    Optimization(
        name="group_offload",
        label="group offloading",
        group="memory",
        description=(
            "Keep the denoiser's layers in host memory (or on disk) and move them group by group to the "
            "device just before they run (diffusers' enable_group_offload, block_level or leaf_level): the "
            "denoiser's weights stop counting against device memory; slower."
        ),
        conflict_reason=(
            "it moves groups of layers on and off the device with hooks, which other placements, a "
            "compiled or "
            "traced UNet, int8_static's graphs, OpenVINO's runtime and layerwise casting do not run"
        ),
        conflicts=(
            "model_cpu_offload",
            "sequential_cpu_offload",
            "device_map_balanced",
            "jit_trace_unet",
            "torch_compile",
            "int8_static",
            "openvino",
            "layerwise_casting",
        ),
        places_modules=True,
        apply=enable_offload,
        revert=disable_offload,
        settings=GroupOffloadSettings,
        settings_reason=offload_reason,
        order=90,
        autotune="excluded",  # placement: trades speed for memory by design
        grid=DEFAULTS_ONLY,
        presets=(),
        ladder_rung=None,
        memory_effect=NO_MEMORY_EFFECT,
    )
)
