"""Modules that stand in for a part of a pipeline and build a graph of it once per input shape.

`PerShapeModule` builds and counts the graphs; `PerShapeUNet` is called the way pipelines call a UNet. The
denoiser a technique replaces is kept in the pipeline's state (`studio.optimizations.denoiser.swap_denoiser`)
so that `restore_denoiser` puts back exactly the module that was loaded. The traced UNet, OpenVINO and int8
static quantization build on these.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import torch
from diffusers.models.unets.unet_2d_condition import UNet2DConditionOutput

from studio.optimizations import kept

log = logging.getLogger(__name__)


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

    def keep_graphs(self, ctx: Any, part: str) -> PerShapeModule:
        """Use the graphs an earlier apply of this configuration built for `part` on this pipeline, and keep
        the ones built from now on for the next apply (`studio.optimizations.kept`)."""
        self._graphs = kept.build_once(ctx, part, lambda: self._graphs)
        return self

    def graph_key(self, inputs: tuple[torch.Tensor, ...]) -> tuple:
        """What makes a new graph: the inputs' shapes and dtypes (subclasses may add to it)."""
        return tuple((tuple(t.shape), t.dtype) for t in inputs)

    def graph_for(self, inputs: tuple[torch.Tensor, ...]) -> Any:
        """The graph for these inputs' shapes and dtypes, built on first sight."""
        key = self.graph_key(inputs)
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
