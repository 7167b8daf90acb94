"""The int8 recipes of the `openvino` technique's calibrated modes, on a converted UNet (or VAE decoder):
NNCF's static int8 (`static_int8`), optimum-intel's hybrid (`hybrid_quantize`), full int8 with int8 MatMuls
(`full_quantize`) or with the Linear layers first rewritten as 1x1 convolutions over the tokens
(`linears_as_convolutions`, for CPUs without VNNI), and the VAE decoder's (`decoder_quantize`). The modes and
the settings' values they take are named in `openvino.models`."""

from __future__ import annotations

import importlib
import math
from collections.abc import Collection
from typing import Any

from studio.optimizations.openvino.models import nncf, opset


def _constant_behind(op: Any, port: int) -> bool:
    """Whether `op`'s input `port` is fed by a Constant (through Convert, FakeQuantize or Reshape)."""
    node = op.input_value(port).get_node()
    while node.get_type_name() in ("Convert", "FakeQuantize", "Reshape") and node.inputs():
        node = node.input_value(0).get_node()
    return node.get_type_name() == "Constant"


def linears_as_convolutions(model: Any) -> int:
    """Rewrites, in place, every MatMul by a constant weight matrix (a Linear layer: `x @ W.T`, x of static
    shape [..., in]) as Reshape to [tokens, in, 1, 1] -> 1x1 Convolution -> Reshape back: the same
    products and sums, one image of 1x1 pixels per token, so no transpose (NCHW and NHWC are the same
    memory there). Returns how many were rewritten."""
    ops = opset()
    count = 0
    for op in model.get_ordered_ops():
        if op.get_type_name() != "MatMul":
            continue
        transposed = op.get_attributes()
        weight = op.input_value(1).get_node()
        if transposed["transpose_a"] or weight.get_type_name() != "Constant" or _constant_behind(op, 0):
            continue  # activations by activations (attention), a compressed weight, or W @ x
        matrix = weight.get_data()
        matrix = matrix if transposed["transpose_b"] else matrix.T  # [out, in]
        source = op.input_value(0)
        shape = source.get_partial_shape()
        if shape.is_dynamic or shape.rank.get_length() < 2:
            continue
        dims = [d.get_length() for d in shape]
        name = op.get_friendly_name()
        tokens = ops.reshape(source, [math.prod(dims[:-1]), dims[-1], 1, 1], False)
        weights = ops.constant(matrix[:, :, None, None].copy())
        conv = ops.convolution(
            tokens, weights, strides=[1, 1], pads_begin=[0, 0], pads_end=[0, 0], dilations=[1, 1]
        )
        conv.set_friendly_name(f"{name}/as_convolution")
        back = ops.reshape(conv, [*dims[:-1], matrix.shape[0]], False)
        op.output(0).replace(back.output(0))
        count += 1
    model.validate_nodes_and_infer_types()
    return count


def _first_convolution(model: Any) -> list[str]:
    return [
        op.get_friendly_name()
        for op in model.get_ops()
        if op.get_type_name() == "Convolution" and "conv_in" in op.get_friendly_name()
    ]


def static_int8(
    model: Any, calibration: Collection[Any], overflow_fix: str, float_ops: list[str], ranges: str = "minmax"
) -> Any:
    """NNCF's static int8 of a diffusion UNet `model`, calibrated on `calibration` (a sized iterable of the
    model's inputs, numpy arrays): convolutions and MatMuls (the transformer model type), SmoothQuant off,
    `conv_in` and the ops named in `float_ops` left as they are. `overflow_fix` (one of OVERFLOW_FIXES) says
    which convolutions get 7-bit weights; optimum-intel leaves NNCF's default, "first_layer_only".
    `ranges`: one of ACTIVATION_RANGES."""
    lib = nncf()
    estimators = importlib.import_module("nncf.quantization.range_estimator").RangeEstimatorParametersSet
    return lib.quantize(
        model,
        lib.Dataset(calibration),
        subset_size=len(calibration),
        model_type=lib.ModelType.TRANSFORMER,
        ignored_scope=lib.IgnoredScope(names=float_ops + _first_convolution(model), validate=False),
        advanced_parameters=lib.AdvancedQuantizationParameters(
            smooth_quant_alphas=lib.AdvancedSmoothQuantParameters(matmul=-1),
            overflow_fix=lib.OverflowFix(overflow_fix),
            activations_range_estimator_params=estimators.MEAN_QUANTILE if ranges == "quantile" else None,
        ),
    )


def _linears(model: Any) -> list[Any]:
    """The MatMuls by a constant weight: the Linear layers."""
    return [
        op
        for op in model.get_ops()
        if op.get_type_name() == "MatMul" and (_constant_behind(op, 0) or _constant_behind(op, 1))
    ]


def hybrid_quantize(
    model: Any, calibration: Collection[Any], overflow_fix: str = "first_layer_only", ranges: str = "minmax"
) -> Any:
    """optimum-intel's hybrid int8 for diffusion UNets: 8-bit weights for the MatMuls with weights (Linear
    layers), then static int8 (`static_int8`) for the rest: convolutions and attention's
    activation-activation MatMuls."""
    linear = [op.get_friendly_name() for op in _linears(model)]
    lib = nncf()
    compressed = lib.compress_weights(model, ignored_scope=lib.IgnoredScope(types=["Convolution"]))
    return static_int8(compressed, calibration, overflow_fix, linear, ranges)


def conditioning_linears(model: Any) -> list[str]:
    """The Linear layers fed by a model input straight (cross-attention's keys and values of the text
    encoder's states) or with fewer than 16 rows (the timestep embedding's): little to compute, so nothing
    to gain in int8, and the text states' outlier channels would lose most of their range."""
    names = []
    for op in _linears(model):
        source = op.input_value(0)
        node = source.get_node()
        while node.get_type_name() in ("Reshape", "Transpose", "Convert"):
            node = node.input_value(0).get_node()
        shape = source.get_partial_shape()
        rows = math.prod(d.get_length() for d in list(shape)[:-1]) if shape.is_static else None
        if node.get_type_name() == "Parameter" or (rows is not None and rows < 16):
            names.append(op.get_friendly_name())
    return names


def full_quantize(
    model: Any, calibration: Collection[Any], overflow_fix: str = "first_layer_only", ranges: str = "minmax"
) -> Any:
    """Static int8 for every convolution and Linear layer of a UNet, the Linear layers as int8 MatMuls, but
    the conditioning ones (`conditioning_linears`), which get 8-bit weights over float math as in hybrid."""
    keep = conditioning_linears(model)
    others = [op.get_friendly_name() for op in _linears(model) if op.get_friendly_name() not in keep]
    lib = nncf()
    ignored = lib.IgnoredScope(types=["Convolution"], names=others, validate=False)
    compressed = lib.compress_weights(model, ignored_scope=ignored) if keep else model
    return static_int8(compressed, calibration, overflow_fix, keep, ranges)


def decoder_quantize(model: Any, calibration: list[tuple[Any, ...]], overflow_fix: str) -> Any:
    """Static int8 for a VAE decoder, calibrated on `calibration` (its inputs, a tuple of numpy arrays each):
    weights and activations of its convolutions and matmuls, the first and last convolutions kept float."""
    lib = nncf()
    ends = [
        op.get_friendly_name()
        for op in model.get_ops()
        if op.get_type_name() == "Convolution"
        and any(k in op.get_friendly_name() for k in ("conv_in", "conv_out"))
    ]
    return lib.quantize(
        model,
        lib.Dataset(calibration),
        subset_size=len(calibration),
        ignored_scope=lib.IgnoredScope(names=ends, validate=False),
        advanced_parameters=lib.AdvancedQuantizationParameters(overflow_fix=lib.OverflowFix(overflow_fix)),
    )
