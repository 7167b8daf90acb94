"""Layout and graph techniques on the UNet: channels-last, a traced UNet, torch.compile.

Traced and compiled UNets wrap the original module, which is kept in the pipeline's
state so that revert puts back exactly the module that was loaded.

Regional compilation (`torch_compile` with `regional=True`) compiles each repeated block
in place instead (diffusers' `compile_repeated_blocks`: the classes named in the model's
`_repeated_blocks`, `BasicTransformerBlock` for UNets): one small graph reused by every
block of the same shape, so the first call pays much less compile time. It matches classes
through the MRO, so blocks whose class another technique swapped (token merging) still count.
Revert drops each block's compiled call.

A compile that fails to load a damaged shared object from inductor's on-disk cache deletes it and
compiles again (studio.optimizations.inductor_cache).

Modes (checked by TorchCompileSettings): "default"; "reduce-overhead" adds CUDA
graphs, which inductor skips on a CPU (it then behaves as "default"); "max-autotune" also
benchmarks GEMM/convolution templates while compiling, which on a CPU makes the first call
take many minutes for a small gain.

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
"""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass
from typing import Any

import torch
from diffusers.models.unets.unet_2d_condition import UNet2DConditionOutput

from studio import checks
from studio.errors import ValidationError
from studio.optimizations.base import Context, Optimization, Settings, register
from studio.optimizations.inductor_cache import recovering

log = logging.getLogger(__name__)


def _relayout(memory_format: torch.memory_format):
    """Re-lay out the UNet's 4-D weights only (what `unet.to(memory_format=...)` changes), skipping
    the thousands of other tensors that `Module.to` would visit: switching stays cheap."""

    def switch(pipe: Any, ctx: Context) -> None:
        for module in pipe.unet.modules():
            for param in module.parameters(recurse=False):
                if param.dim() == 4 and not param.is_contiguous(memory_format=memory_format):
                    param.data = param.data.contiguous(memory_format=memory_format)

    return switch


_channels_last = _relayout(torch.channels_last)
_contiguous = _relayout(torch.contiguous_format)


class _PlainUNet(torch.nn.Module):
    """The UNet with positional inputs and a tensor output, as torch.jit.trace needs."""

    def __init__(self, unet: torch.nn.Module):
        super().__init__()
        self.unet = unet

    def forward(self, sample: torch.Tensor, timestep: torch.Tensor, encoder_hidden_states: torch.Tensor):
        return self.unet(sample, timestep, encoder_hidden_states=encoder_hidden_states, return_dict=False)[0]


class PerShapeModule(torch.nn.Module):
    """Stands in for a module; builds a graph of it once per input shape (a new shape is a new build).

    Attributes the pipeline reads (config, dtype, device, ...) come from the original.
    Subclasses say how a graph is built (`build`) and under which name builds are counted in
    the pipeline's stats (`counter`: `<counter>_count`, `<counter>_seconds`).
    """

    counter = "trace"

    def __init__(self, module: torch.nn.Module, stats: dict[str, Any]):
        super().__init__()
        self.original = module
        self._graphs: dict[tuple, Any] = {}
        self._stats = stats

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self._modules["original"], name)

    def build(self, inputs: tuple[torch.Tensor, ...]) -> Any:
        raise NotImplementedError

    def graph_for(self, inputs: tuple[torch.Tensor, ...]) -> Any:
        """The graph for these inputs' shapes and dtypes, built on first sight."""
        key = tuple((tuple(t.shape), t.dtype) for t in inputs)
        graph = self._graphs.get(key)
        if graph is None:
            start = time.perf_counter()
            graph = self._graphs[key] = self.build(inputs)
            seconds = time.perf_counter() - start
            self._stats[f"{self.counter}_count"] = self._stats.get(f"{self.counter}_count", 0) + 1
            self._stats[f"{self.counter}_seconds"] = self._stats.get(f"{self.counter}_seconds", 0.0) + seconds
            log.info("%s: built a graph for input shape %s in %.2fs", type(self).__name__, key, seconds)
        return graph


class PerShapeUNet(PerShapeModule):
    """A UNet called the way pipelines call it, with a graph per input shape of (sample, timestep, text)."""

    def __init__(self, unet: torch.nn.Module, stats: dict[str, Any]):
        super().__init__(unet, stats)
        self._plain = _PlainUNet(unet)

    def forward(
        self, sample, timestep, encoder_hidden_states=None, *args, return_dict: bool = True, **kwargs
    ):
        extra = [k for k, v in kwargs.items() if v is not None]
        if args or extra:
            raise TypeError(
                f"{type(self).__name__} takes no extra conditioning ({extra or 'positional'}); use "
                "torch_compile"
            )
        timestep = torch.as_tensor(timestep, device=sample.device)
        inputs = (sample, timestep, encoder_hidden_states)
        out = self.graph_for(inputs)(*inputs)
        return UNet2DConditionOutput(sample=out) if return_dict else (out,)


class TracedUNet(PerShapeUNet):
    """A torch.jit.trace of the UNet per input shape."""

    def build(self, inputs: tuple[torch.Tensor, ...]) -> torch.jit.ScriptModule:
        return torch.jit.trace(self._plain, inputs, check_trace=False)


def _swap_unet(make):
    def apply(pipe: Any, ctx: Context) -> None:
        ctx.state["unet_original"] = pipe.unet
        pipe.unet = make(pipe.unet, ctx)

    return apply


def restore_unet(pipe: Any, ctx: Context) -> None:
    original = ctx.state.pop("unet_original", None)
    if original is not None:
        pipe.unet = original


def _traced(unet: torch.nn.Module, ctx: Context) -> torch.nn.Module:
    return TracedUNet(unet.eval(), ctx.stats)


DYNAMIC = {"auto": None, "true": True, "false": False}  # the `dynamic` setting -> torch.compile(dynamic=...)
MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


@dataclass(frozen=True)
class TorchCompileSettings(Settings):
    """`mode`, `regional` (block by block), `dynamic` (auto, true, false), inductor's `freezing` and
    `cpp_wrapper`."""

    mode: str = "default"
    regional: bool = False
    dynamic: str = "auto"
    freezing: bool = False
    cpp_wrapper: bool = False

    def __post_init__(self) -> None:
        self._set("mode", checks.one_of("torch_compile mode", self.mode, MODES))
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
    return CompileSettings(mode, settings.regional, DYNAMIC[settings.dynamic], options)


def counting_backend(stats: dict[str, Any], options: dict[str, Any]):
    """Inductor (with these config ``options``) that counts each graph it builds in ``stats``.

    Dynamo calls the backend once per new graph: the first call, and every recompile (a new
    input shape, a guard that failed). ``compile_count`` and ``compile_seconds`` feed the
    "recompiles" column and the recompile-storm warning.
    """
    from torch._inductor.compile_fx import compile_fx

    options = dict(options)

    def backend(graph: torch.fx.GraphModule, example_inputs: list) -> Any:
        start = time.perf_counter()
        compiled = compile_fx(graph, example_inputs, config_patches=options)
        stats["compile_count"] = stats.get("compile_count", 0) + 1
        stats["compile_seconds"] = stats.get("compile_seconds", 0.0) + time.perf_counter() - start
        log.info("torch.compile built graph %d in %.2fs", stats["compile_count"], time.perf_counter() - start)
        return compiled

    return backend


def freezing(enabled: bool = True) -> contextlib.AbstractContextManager:
    """Inductor's freezing on around calls of a compiled graph. Dynamo reads it while tracing (weights
    become constants of the graph only then), so a backend option alone would come too late."""
    return torch._inductor.config.patch(freezing=True) if enabled else contextlib.nullcontext()


def _freezing_if_asked(ctx: Context) -> contextlib.AbstractContextManager:
    return freezing(bool(compile_settings(ctx).options.get("freezing")))


def _compiled(unet: torch.nn.Module, ctx: Context) -> torch.nn.Module:
    settings = compile_settings(ctx)
    compiled = torch.compile(
        unet, backend=counting_backend(ctx.stats, settings.options), dynamic=settings.dynamic
    )
    compiled.forward = recovering(compiled.forward)  # a damaged inductor cache entry is rebuilt, not fatal
    return compiled


def repeated_blocks(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The submodules whose class (or a base class) is named in `model._repeated_blocks`."""
    names = set(getattr(model, "_repeated_blocks", None) or ())
    return [m for m in model.modules() if any(c.__name__ in names for c in type(m).__mro__)]


# Dynamo keeps at most `recompile_limit` graphs per code object (8 by default) and then runs it
# eagerly, with only a log warning. Every UNet of a class shares its forward's code object, so a
# studio holding a few compiled pipelines (each with a graph per shape, per DeepCache path and per
# batch under cfg_cutoff) would silently lose compilation on the later ones. The studio reports
# recompile storms itself (studio.engine), so it gives dynamo room for every live pipeline.
RECOMPILE_LIMIT = 64


def _room_for_graphs() -> None:
    config = torch._dynamo.config
    config.recompile_limit = max(config.recompile_limit, RECOMPILE_LIMIT)
    config.accumulated_recompile_limit = max(config.accumulated_recompile_limit, 4 * RECOMPILE_LIMIT)


def _compile(pipe: Any, ctx: Context) -> None:
    settings = compile_settings(ctx)
    _room_for_graphs()
    if not settings.regional:
        _swap_unet(_compiled)(pipe, ctx)
        return
    blocks = repeated_blocks(pipe.unet)
    if not blocks:
        raise ValidationError(
            f"torch_compile regional=true found no repeated blocks in {type(pipe.unet).__name__}; use "
            "regional=false."
        )
    backend = counting_backend(ctx.stats, settings.options)
    for block in blocks:
        block.compile(backend=backend, dynamic=settings.dynamic)
        block._compiled_call_impl = recovering(block._compiled_call_impl)
    ctx.state["compiled_blocks"] = blocks


def _uncompile(pipe: Any, ctx: Context) -> None:
    for block in ctx.state.pop("compiled_blocks", []):
        block.__dict__.pop("_compiled_call_impl", None)
    restore_unet(pipe, ctx)


register(
    Optimization(
        name="channels_last",
        label="channels last",
        group="speed",
        description="Store the UNet's 4-D tensors as NHWC, which many convolution kernels prefer.",
        apply=_channels_last,
        revert=_contiguous,
        order=10,
    )
)
register(
    Optimization(
        name="jit_trace_unet",
        label="traced UNet",
        group="speed",
        description="Replace the UNet by a torch.jit.trace of it (one trace per input shape).",
        requires=("family:sd",),
        conflicts=("torch_compile",),
        reversible=False,
        apply=_swap_unet(_traced),
        revert=restore_unet,
        order=80,
    )
)
register(
    Optimization(
        name="torch_compile",
        label="torch.compile UNet",
        group="speed",
        description=(
            "Compile the UNet with torch.compile (inductor), whole or block by block (regional); "
            "the first call pays the compile time. Settings: mode, regional, dynamic (auto/true/false), "
            "freezing and cpp_wrapper (inductor's CPU inference options)."
        ),
        conflicts=("jit_trace_unet",),
        reversible=False,
        apply=_compile,
        revert=_uncompile,
        settings=TorchCompileSettings,
        call_context=_freezing_if_asked,
        order=80,
    )
)
