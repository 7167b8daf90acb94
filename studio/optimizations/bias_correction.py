"""Bias correction for static int8: the mean error quantization adds to each output channel, taken back out.

Rounding a layer's weights and input to 8 bits shifts the mean of its output channels a little; through a
UNet's depth and a denoising loop those shifts add up and move the image (colours, brightness) further than
the rounding noise itself. After calibration, with the activation ranges fixed, the calibration run is
repeated once; for every convolution and linear layer whose input and weight are observed (so will be
quantized), the layer is computed on that input both in float and with input and weight fake-quantized to the
observed ranges, and the mean difference per output channel, over the calibration run, is added to its bias
(the fast bias correction of NNCF, the post-training recipe OpenVINO applies). The corrected biases are new
tensors: the exported graph shares its parameters with the float model, which must stay untouched for revert.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

CONV, LINEAR = torch.ops.aten.conv2d.default, torch.ops.aten.linear.default
CONV_DEFAULTS = ([1, 1], [0, 0], [1, 1], 1)  # stride, padding, dilation, groups


class _Probe(torch.nn.Module):
    """Placed on a layer's input in the graph: accumulates the layer's float-minus-quantized output mean per
    channel, and passes the input on unchanged."""

    def __init__(self, kind: str, weight: torch.Tensor, observers: tuple[Any, Any], conv_args: tuple):
        super().__init__()
        into, of_weight = observers
        scale, zero = into.calculate_qparams()
        self.input_q = (float(scale), int(zero), into.quant_min, into.quant_max)
        scales, zeros = of_weight.calculate_qparams()
        self.weight, self.kind, self.conv_args = weight, kind, conv_args
        self.weight_q = torch.fake_quantize_per_channel_affine(
            weight,
            scales.float(),
            zeros.int(),
            axis=of_weight.ch_axis,
            quant_min=of_weight.quant_min,
            quant_max=of_weight.quant_max,
        )
        self.total: torch.Tensor | None = None
        self.calls = 0

    def _layer(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        if self.kind == "linear":
            return F.linear(x, weight)
        return F.conv2d(x, weight, None, *self.conv_args)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        quantized = torch.fake_quantize_per_tensor_affine(x, *self.input_q)
        error = (self._layer(x, self.weight) - self._layer(quantized, self.weight_q)).double()
        mean = (
            error.mean(dim=(0, 2, 3)) if self.kind == "conv" else error.reshape(-1, error.shape[-1]).mean(0)
        )
        self.total = mean if self.total is None else self.total + mean
        self.calls += 1
        return x

    def shift(self) -> torch.Tensor | None:
        return None if self.total is None else self.total / self.calls


def _observer(graph_module: torch.fx.GraphModule, node: torch.fx.Node) -> Any:
    if node.op != "call_module":
        return None
    module = graph_module.get_submodule(node.target)
    return module if hasattr(module, "calculate_qparams") else None


def _attribute(graph_module: torch.fx.GraphModule, target: str) -> torch.Tensor:
    owner, _, name = target.rpartition(".")
    return getattr(graph_module.get_submodule(owner) if owner else graph_module, name)


def _layers(observed: torch.fx.GraphModule) -> list[tuple[torch.fx.Node, str, tuple, str]]:
    """The layers to correct: (input node, kind, observers and weight, bias attribute) for each convolution
    and linear layer with an observed input, an observed weight attribute and a bias attribute."""
    found = []
    for node in observed.graph.nodes:
        if node.target not in (CONV, LINEAR) or len(node.args) < 3 or node.args[2] is None:
            continue
        x, w, bias = node.args[:3]
        into, of_weight = _observer(observed, x), _observer(observed, w)
        if into is None or of_weight is None or bias.op != "get_attr" or w.args[0].op != "get_attr":
            continue
        weight = _attribute(observed, w.args[0].target)
        conv_args = (*node.args[3:], *CONV_DEFAULTS[len(node.args) - 3 :])[:4]
        kind = "conv" if node.target is CONV else "linear"
        found.append((x, kind, (weight, into, of_weight, conv_args), bias.target))
    return found


def correct_biases(observed: torch.fx.GraphModule, calibrate: Callable[[Any], None]) -> int:
    """Run `calibrate(observed)` once more with the observers' ranges fixed and correct the biases of the
    layers that will be quantized; the number of layers corrected."""
    layers = _layers(observed)
    probes, observers = [], {id(o): o for _, _, (_, o, _, _), _ in layers}
    for index, (x, kind, (weight, into, of_weight, conv_args), bias) in enumerate(layers):
        name, module = f"_bias_probe_{index}", _Probe(kind, weight, (into, of_weight), conv_args)
        observed.add_submodule(name, module)
        with observed.graph.inserting_after(x):
            probes.append((name, module, observed.graph.call_module(name, (x,)), bias))
    observed.recompile()
    for observer in observers.values():
        observer.forward = lambda t: t  # the calibrated ranges stay as they are
    try:
        with torch.no_grad():
            calibrate(observed)
    finally:
        for observer in observers.values():
            del observer.forward
        for name, _, node, _ in probes:
            observed.graph.erase_node(node)
            observed.delete_submodule(name)
        observed.recompile()
    corrected = 0
    for _, module, _, target in probes:
        shift = module.shift()
        if shift is None:
            continue
        owner, _, name = target.rpartition(".")
        bias = _attribute(observed, target)
        fixed = torch.nn.Parameter((bias.detach() + shift.to(bias.dtype)).clone(), requires_grad=False)
        setattr(observed.get_submodule(owner) if owner else observed, name, fixed)
        corrected += 1
    return corrected
