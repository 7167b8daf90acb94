"""torch.compile on the denoiser, UNet or transformer (the torch_compile technique), and inductor's freezing,
which the int8 static quantization reuses (both count their builds with `studio.optimizations.counting`).

A compiled denoiser wraps the original module, which is kept in the pipeline's state
(studio.optimizations.denoiser.swap_denoiser) so that revert puts back exactly the module that was loaded.

Regional compilation (`torch_compile` with `regional=True`) compiles each repeated block
in place instead (diffusers' `compile_repeated_blocks`: the classes named in the model's
`_repeated_blocks`: `BasicTransformerBlock` for UNets, Flux's double- and single-stream blocks; for SD3, whose
transformer names none in diffusers 0.42, the class of its `transformer_blocks`): one small graph reused by
every block of the same shape, so the first call pays much less compile time. It matches classes
through the MRO, so blocks whose class another technique swapped (token merging) still count.
Revert drops each block's compiled call.

A compile that fails to load a damaged shared object from inductor's on-disk cache deletes it and
compiles again (studio.optimizations.inductor_cache).

What a process compiled is kept for the next one: torch's portable cache artifacts are loaded from the
studio's home once per process, before the first compile, and saved there after each call that built
graphs (studio.optimizations.compile_cache). Each build records its phase in the pipeline's stats
(studio.optimizations.phases): "warm" when inductor's FX graph cache served it, "cold" when it was
lowered now (also every build with `freezing`, which torch 2.13's FX graph cache bypasses, though its
C++ kernels may still come from inductor's cache folder).

Modes (checked by TorchCompileSettings): "default"; "reduce-overhead" adds CUDA
graphs, which inductor skips on a CPU (it then behaves as "default"); "max-autotune" also
benchmarks GEMM/convolution templates while compiling, which on a CPU makes the first call
take many minutes for a small gain, and on an H100 took more than 8 minutes for SD 1.5's UNet
at 512x512 (4-40 s per shape; docs/benchmarks.md).

Settings for inference on a CPU (Intel's and PyTorch's recommended inductor options):
- `dynamic`: "auto" is torch's default (the second input shape seen recompiles the graph with
  symbolic sizes, slower kernels but no further recompiles); "false" builds one static graph
  per shape (fastest kernels; each new resolution, or the batch dropping from 2 to 1 under
  `cfg_cutoff`, costs one more build); "true" starts symbolic.
- `freezing`: inline the weights as constants, fold them and pre-pack convolution/linear
  weights for oneDNN. The compiled graph keeps its own copies, so later changes to the
  weights are not seen (torch_compile is applied last and is not reverted in place).
- `cpp_wrapper`: the graph's launcher is generated C++ instead of Python, which removes
  per-kernel Python overhead on small models; compiling takes longer.

`tuning`: "coordinate" sets the inductor options the public Flux recipes set on a GPU (flux-fast,
diffusers-torchao): coordinate-descent tuning of each generated kernel's launch settings (checking
every direction), 1x1 convolutions as matmuls, and no epilogue fusion into matmul templates. It
lengthens the compile; "default" leaves inductor's defaults.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from studio import checks, devices
from studio.errors import ValidationError
from studio.optimizations import compile_cache, kept
from studio.optimizations.base import JUST_IN_TIME, Context, Optimization, Settings, register
from studio.optimizations.counting import counting_backend, counting_into
from studio.optimizations.denoiser import denoiser, restore_denoiser, swap_denoiser
from studio.optimizations.facts import DEFAULTS_ONLY, NO_MEMORY_EFFECT, Preset
from studio.optimizations.inductor_cache import recovering

log = logging.getLogger(__name__)


DYNAMIC = {"auto": None, "true": True, "false": False}  # the `dynamic` setting -> torch.compile(dynamic=...)
MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
TUNINGS = {  # the `tuning` setting -> inductor options
    "default": {},
    "coordinate": {
        "coordinate_descent_tuning": True,
        "coordinate_descent_check_all_directions": True,
        "conv_1x1_as_mm": True,
        "epilogue_fusion": False,
    },
}


@dataclass(frozen=True)
class TorchCompileSettings(Settings):
    """`mode`, `regional` (block by block), `dynamic` (auto, true, false), inductor's `freezing` and
    `cpp_wrapper`, and `tuning` (default, coordinate)."""

    mode: str = "default"
    regional: bool = False
    dynamic: str = "auto"
    freezing: bool = False
    cpp_wrapper: bool = False
    tuning: str = "default"

    def __post_init__(self) -> None:
        self._set("mode", checks.one_of("torch_compile mode", self.mode, MODES))
        self._set("tuning", checks.one_of("torch_compile tuning", self.tuning, tuple(TUNINGS)))
        self._set(
            "dynamic", checks.one_of("torch_compile dynamic", str(self.dynamic).lower(), tuple(DYNAMIC))
        )
        for name in ("regional", "freezing", "cpp_wrapper"):
            self._set(name, checks.boolean(f"torch_compile {name}", getattr(self, name)))


@dataclass(frozen=True)
class CompileSettings:
    """A request's torch_compile settings, as torch.compile and inductor take them."""

    mode: str | None
    regional: bool
    dynamic: bool | None
    options: dict[str, Any]


def compile_settings(ctx: Context) -> CompileSettings:
    settings = ctx.settings("torch_compile")
    mode = None if settings.mode == "default" else settings.mode
    options = dict(torch._inductor.list_mode_options(mode)) if mode else {}
    options.update({k: True for k in ("freezing", "cpp_wrapper") if getattr(settings, k)})
    options.update(TUNINGS[settings.tuning])
    return CompileSettings(mode, settings.regional, DYNAMIC[settings.dynamic], options)


def freezing(enabled: bool = True) -> contextlib.AbstractContextManager:
    """Inductor's freezing on around calls of a compiled graph. Dynamo reads it while tracing (weights
    become constants of the graph only then), so a backend option alone would come too late."""
    return torch._inductor.config.patch(freezing=True) if enabled else contextlib.nullcontext()


def _freezing_if_asked(ctx: Context) -> contextlib.AbstractContextManager:
    return freezing(bool(compile_settings(ctx).options.get("freezing")))


def _compiled(model: torch.nn.Module, ctx: Context) -> torch.nn.Module:
    settings = compile_settings(ctx)
    backend = counting_backend(settings.options, technique="torch_compile", what=type(model).__name__)
    compiled = torch.compile(model, backend=backend, dynamic=settings.dynamic)
    # a damaged inductor cache entry is rebuilt, not fatal; what a call built is saved for the next process
    compiled.forward = saving(recovering(compiled.forward), ctx)
    return compiled


def saving(fn: Callable[..., Any], ctx: Context) -> Callable[..., Any]:
    """`fn`, counting the graphs it builds in `ctx.stats`, after which torch.compile's cache artifacts are
    saved (studio.optimizations.compile_cache) when the call built graphs (`compile_count` grew)."""

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        built = ctx.stats.get("compile_count", 0)
        with counting_into(ctx.stats):
            result = fn(*args, **kwargs)
        if ctx.stats.get("compile_count", 0) > built:
            compile_cache.save(ctx.hw or devices.detect(), ctx.device_type)
        return result

    return call


def repeated_blocks(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The submodules whose class (or a base class) is named in `model._repeated_blocks`, or, for a model that
    names none, is the class of one of its `transformer_blocks`."""
    names = set(getattr(model, "_repeated_blocks", None) or ())
    names = names or {type(b).__name__ for b in getattr(model, "transformer_blocks", None) or ()}
    return [m for m in model.modules() if any(c.__name__ in names for c in type(m).__mro__)]


# Dynamo keeps at most `recompile_limit` graphs per code object (8 by default) and then runs it
# eagerly, with only a log warning. Every UNet of a class shares its forward's code object, so a
# studio holding a few compiled pipelines (each with a graph per shape, per DeepCache path and per
# batch under cfg_cutoff) would silently lose compilation on the later ones. The studio reports
# recompile storms itself (studio.recompiles), so it gives dynamo room for every live pipeline.
RECOMPILE_LIMIT = 64


def _room_for_graphs() -> None:
    config = torch._dynamo.config
    config.recompile_limit = max(config.recompile_limit, RECOMPILE_LIMIT)
    config.accumulated_recompile_limit = max(config.accumulated_recompile_limit, 4 * RECOMPILE_LIMIT)


def _compile(pipe: Any, ctx: Context) -> None:
    settings = compile_settings(ctx)
    _room_for_graphs()
    compile_cache.load(
        ctx.hw or devices.detect(), ctx.device_type
    )  # once per process, before its first compile
    if not settings.regional:
        # the compiled module of an earlier apply of this configuration: dynamo's graphs for it are reused,
        # where a new torch.compile would add a graph per apply to the model's code (and to memory)
        swap_denoiser(lambda model, ctx: kept.build_once(ctx, "denoiser", lambda: _compiled(model, ctx)))(
            pipe, ctx
        )
        return
    blocks = repeated_blocks(denoiser(pipe))
    if not blocks:
        raise ValidationError(
            f"torch_compile regional=true found no repeated blocks in {type(denoiser(pipe)).__name__}; use "
            "regional=false."
        )
    part = ("blocks", *map(id, blocks))  # the kept calls hold their blocks: an id is not reused meanwhile
    calls = kept.build_once(ctx, part, lambda: _compiled_calls(blocks, ctx))
    for block, call in calls:
        block._compiled_call_impl = call
    ctx.state["compiled_blocks"] = blocks


def _compiled_calls(blocks: list[torch.nn.Module], ctx: Context) -> list[tuple[torch.nn.Module, Any]]:
    """Each block with its compiled call (what `nn.Module.compile` sets as `_compiled_call_impl`)."""
    settings = compile_settings(ctx)
    what = " or ".join(sorted({type(block).__name__ for block in blocks}))
    backend = counting_backend(settings.options, technique="torch_compile", what=what)
    graphs = ctx.device_type == "cuda" and settings.options.get("triton.cudagraphs")
    calls = []
    for block in blocks:
        compiled = torch.compile(block._call_impl, backend=backend, dynamic=settings.dynamic)
        call = saving(recovering(compiled), ctx)
        calls.append((block, own_outputs(call) if graphs else call))
    return calls


def own_outputs(fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn` returning copies of its tensors. Blocks of one class share a compiled graph, and with CUDA graphs
    each replay writes the graph's output buffers: without a copy, the next block's replay overwrites the
    output the model still holds (torch raises "accessing tensor output of CUDAGraphs that has been
    overwritten by a subsequent run"; seen on Flux's transformer blocks)."""

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        return torch.utils._pytree.tree_map_only(torch.Tensor, torch.clone, fn(*args, **kwargs))

    return call


def _uncompile(pipe: Any, ctx: Context) -> None:
    for block in ctx.state.pop("compiled_blocks", []):
        block.__dict__.pop("_compiled_call_impl", None)
    restore_denoiser(pipe, ctx)


register(
    Optimization(
        name="torch_compile",
        label="torch.compile",
        group="speed",
        description=(
            "Compile the UNet or transformer with torch.compile (inductor), whole or block by block "
            "(regional: the model's repeated blocks, as diffusers' compile_repeated_blocks); the first call "
            "pays the compile time (mode=max-autotune also times kernels for every matmul and convolution "
            "shape: more than 8 minutes for SD 1.5's UNet on an H100). Settings: mode, regional, dynamic "
            "(auto/true/false), freezing and cpp_wrapper (inductor's CPU inference options), tuning "
            "(coordinate: the inductor options of the public Flux recipes on a GPU)."
        ),
        requires=("kept-across-requests",),
        reasons={"kept-across-requests": JUST_IN_TIME},
        conflict_reason="both replace the UNet's call with a graph of their own; one at a time",
        conflicts=("jit_trace_unet",),
        reversible=False,
        apply=_compile,
        revert=_uncompile,
        settings=TorchCompileSettings,
        call_context=_freezing_if_asked,
        order=80,
        autotune="slow_to_prepare",
        grid=DEFAULTS_ONLY,
        presets=(Preset(150, ("torch_compile",)),),
        ladder_rung=None,
        memory_effect=NO_MEMORY_EFFECT,
    )
)
