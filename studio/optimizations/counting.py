"""Inductor as the studio's torch.compile backend, counting each graph it builds in the pipeline's stats.

Dynamo calls the backend once per new graph: the first call, and every recompile (a new input shape, a guard
that failed). ``compile_count`` and ``compile_seconds`` feed the "recompiles" column and the recompile-storm
warning; each build can also be recorded as a phase (`studio.phases`). The stats a build counts into are the
enclosing `counting_into` block's, so that one backend object serves every compile with the same settings
(`counting_backend`). torch_compile (`studio.optimizations.compile`) and int8_static use it.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import logging
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch

from studio import phases
from studio.optimizations import compile_activity, kept

log = logging.getLogger(__name__)


_COUNTING_INTO: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar(
    "compile_stats", default=None
)


@contextlib.contextmanager
def counting_into(stats: dict[str, Any]) -> Iterator[None]:
    """Graphs a counting backend builds during the block are counted in `stats` (a pipeline's)."""
    token = _COUNTING_INTO.set(stats)
    try:
        yield
    finally:
        _COUNTING_INTO.reset(token)


def counting_backend(options: dict[str, Any], *, technique: str | None = None, what: str = "a graph"):
    """Inductor (with these config ``options``) that counts each graph it builds in the stats of the
    enclosing `counting_into` block (none: not counted).

    Dynamo calls the backend once per new graph: the first call, and every recompile (a new
    input shape, a guard that failed). ``compile_count`` and ``compile_seconds`` feed the
    "recompiles" column and the recompile-storm warning. With a ``technique`` name, each build
    is also recorded as a phase (studio.optimizations.phases): "warm" when inductor served it
    from its caches (FX graph cache hits, none missed or bypassed), else "cold"; ``what`` names
    the module built ("UNet2DConditionModel"), the phase adds its input's shape.

    One backend object serves every compile with the same arguments: dynamo keeps the graphs it built for a
    module on the module's code until the module is gone, but only for a backend it has seen before; a new
    backend per compile left every dropped copy's graphs in memory (~14 MB per compile of the bundled model's
    UNet).
    """
    compile_activity.watch_dynamo()  # a first call's progress line says dynamo's tracing too
    return _backend(tuple(sorted(options.items())), technique, what)


@functools.cache
def _backend(options: tuple[tuple[str, Any], ...], technique: str | None, what: str) -> Callable[..., Any]:
    patches = dict(options)

    def backend(graph: torch.fx.GraphModule, example_inputs: list) -> Any:
        from torch._inductor import compile_fx  # looked up at each build: the backend lives for the process

        start, before = time.perf_counter(), _cache_events()
        stats = _COUNTING_INTO.get()
        number = (stats or {}).get("compile_count", 0) + 1
        compile_activity.say(f"graph {number}: lowering it and compiling its kernels (inductor)")
        try:
            compiled = compile_fx.compile_fx(graph, example_inputs, config_patches=patches)
        finally:
            compile_activity.clear()  # built (or failed): nothing is being prepared any more
        took = time.perf_counter() - start
        if stats is None:
            return compiled
        stats["compile_count"] = stats.get("compile_count", 0) + 1
        stats["compile_seconds"] = stats.get("compile_seconds", 0.0) + took
        phase = build_phase(before, _cache_events())
        log.info("torch.compile built graph %d in %.2fs (%s)", stats["compile_count"], took, phase)
        if technique is not None:
            described = f"{what} at {_input_shape(graph, example_inputs)}"
            phases.record(stats, technique=technique, phase=phase, seconds=took, what=described)
        return compiled

    return backend


def _cache_events() -> tuple[int, int, int]:
    """Inductor's FX graph cache so far in this process: (hits, misses, bypasses). torch 2.13 counts them in
    `torch._dynamo.utils.counters["inductor"]`; a bypass is a graph it would not cache (freezing's)."""
    from torch._dynamo.utils import counters

    inductor = counters["inductor"]
    return inductor["fxgraph_cache_hit"], inductor["fxgraph_cache_miss"], inductor["fxgraph_cache_bypass"]


def build_phase(before: tuple[int, int, int], after: tuple[int, int, int]) -> str:
    """The phase of a build between these `_cache_events`: "warm" when it only hit inductor's caches, else
    "cold"."""
    hits, misses, bypasses = (a - b for a, b in zip(after, before, strict=True))
    return phases.WARM if hits and not (misses or bypasses) else phases.COLD


def _input_shape(graph: torch.fx.GraphModule, example_inputs: list) -> str:
    """The shape of the graph's first input that is not a weight ("2x4x8x8"), or "its inputs"."""
    names = [node.name for node in graph.graph.nodes if node.op == "placeholder"]
    for name, value in zip(names, example_inputs, strict=False):
        if isinstance(value, torch.Tensor) and not any(k in name for k in ("_parameters_", "_buffers_")):
            return "x".join(str(size) for size in value.shape) or "a scalar"
    return "its inputs"


@kept.on_release
def forget_dropped_graphs() -> None:
    """Let go of the modules inductor loaded that carry a graph's own values (frozen weights, constants).

    Inductor keeps every Python module it loads in a process-wide list (and in `sys.modules`), never emptied:
    with `freezing` (torch_compile's setting, int8_static's quantized weights) each build's weights stay with
    it after the graph is gone (~60 MB per int8_static build of the bundled model). A live graph holds its own
    functions and their globals, so only the dropped ones' go. The modules without such values stay: inductor
    reuses them for the same code.
    """
    from torch._inductor.codecache import PyCodeCache

    shared = {id(module) for module in PyCodeCache.modules_no_attr.values()}
    for module in [m for m in PyCodeCache.modules if id(m) not in shared]:
        PyCodeCache.modules.remove(module)
        if sys.modules.get(module.__name__) is module:
            del sys.modules[module.__name__]
