"""OpenVINO models of a pipeline's parts: conversion, 8-bit weights, hybrid int8, and the disk cache.

A part (UNet, VAE decoder, text encoder) is converted with OpenVINO's own `convert_model` for the exact
input shapes of a call (static shapes: no shape-dependent branch of the PyTorch code is baked in for
another size, and the CPU plugin runs static shapes fastest), then optionally compressed with NNCF:
- "int8_weights": 8-bit weights (per output channel, asymmetric), activations stay float;
- "hybrid_int8": the recipe optimum-intel uses for diffusion UNets: 8-bit weights for the Linear layers,
  and static int8 (weights and activations, calibrated) for the convolutions and the attention matmuls,
  the first convolution kept float;
- "full_int8": static int8 for the Linear layers too (`full_quantize`): as int8 MatMuls on CPUs with VNNI
  or AMX, or, elsewhere, as 1x1 convolutions over the tokens (`linears_as_convolutions`, then hybrid's
  quantization), on the CPU plugin's int8 convolution kernels (its int8 matmul is no faster than fp32
  there; the convolutions, one 1x1 image per token, are slower than int8 MatMuls where VNNI is).
An fp32 model's 3x3 convolutions can be rewritten as Winograd's minimal filtering (`openvino_winograd`).
Converting and calibrating cost a first call (minutes for SD 1.5); the result is written under
`$STUDIO_HOME/openvino/`, keyed by the part's weights, the shapes, the mode, the calibration and the
library versions, so a later process reads it back in a fraction of that.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import json
import logging
import math
import os
import shutil
import sys
import tempfile
import warnings
from collections.abc import Callable, Collection, Iterator
from pathlib import Path
from typing import Any

import torch

from studio import settings as studio_settings
from studio.errors import UnavailableError
from studio.optimizations._quiet import at_least

log = logging.getLogger(__name__)

MODES = ("fp32", "int8_weights", "hybrid_int8", "full_int8")
CALIBRATED = ("hybrid_int8", "full_int8")  # the modes whose UNet has int8 activations
OVERFLOW_FIXES = ("enable", "first_layer_only", "disable")  # nncf.OverflowFix's values
LINEAR_FORMS = ("matmul", "convolution")  # how full int8 runs a UNet's Linear layers
# How NNCF sets each int8 activation's range from the calibration samples: "minmax", its default for
# per-tensor activations (the mean over the samples of each one's min and max); "quantile", the mean of each
# sample's 0.01% and 99.99% quantiles (outliers clipped), computed outside the graph: ~3x the statistics.
ACTIVATION_RANGES = ("minmax", "quantile")


def openvino() -> Any:
    """The openvino module, or UnavailableError with the reason.

    The studio sends no usage data. OpenVINO's converter (already when `openvino` is imported) and NNCF
    report to Google Analytics through `openvino_telemetry`, and write a client id under the home directory,
    unless the user opted out; both fall back to no-op stand-ins when that package cannot be imported, which
    is what blocking it here does, before either is imported.
    """
    if "openvino" not in sys.modules:
        sys.modules.setdefault("openvino_telemetry", None)  # None: `import openvino_telemetry` fails
    try:
        return importlib.import_module("openvino")
    except ImportError as exc:
        raise UnavailableError(f"openvino could not be imported ({exc}).") from exc


def opset() -> Any:
    """OpenVINO's node factories (opset13), imported through `openvino()`: usage reporting blocked first."""
    return importlib.import_module(f"{openvino().__name__}.opset13")


def nncf() -> Any:
    openvino()  # first: usage reporting blocked before nncf is imported
    try:
        lib = importlib.import_module("nncf")
    except ImportError as exc:
        raise UnavailableError(
            f"openvino's int8 modes need nncf, which could not be imported ({exc})."
        ) from exc
    from studio.optimizations import openvino_statistics  # it builds nodes with `opset`

    openvino_statistics.install()  # the models it infers for statistics: cheaper, computing the same
    return lib


def cache_root() -> Path:
    return studio_settings.home() / "openvino"


def fingerprint(module: torch.nn.Module) -> str:
    """A digest of a module's class, parameter names, shapes and a sample of each tensor's values: the same
    weights give the same digest, other weights (almost surely) another one, in milliseconds for SD 1.5."""
    digest = hashlib.sha256(type(module).__qualname__.encode())
    for name, tensor in module.state_dict().items():
        flat = tensor.detach().reshape(-1)
        stride = max(1, flat.numel() // 64)
        digest.update(f"{name}{tuple(tensor.shape)}{tensor.dtype}".encode())
        digest.update(flat[::stride][:64].to(torch.float64).cpu().numpy().tobytes())
    return digest.hexdigest()[:24]


def versions() -> dict[str, str]:
    ov = openvino()
    out = {"openvino": ov.__version__, "torch": torch.__version__}
    if importlib.util.find_spec("nncf") is not None:
        out["nncf"] = importlib.import_module("nncf").__version__
    return out


def cache_key(**parts: Any) -> str:
    return hashlib.sha256(json.dumps({**parts, "versions": versions()}, sort_keys=True).encode()).hexdigest()[
        :32
    ]


def cached_model(key: str, build: Callable[[], Any], stats: dict[str, Any]) -> Any:
    """The OpenVINO model stored under `key`, or `build()` written there first (atomically: a directory
    renamed into place) and read back. An unreadable entry is removed and rebuilt. A model read from the
    cache maps its weights from the file (OpenVINO's mmap), so the build's own copy is freed before the
    model is compiled: memory a compiled part keeps in place (its MatMuls' weights) stays file-backed."""
    ov = openvino()
    path = cache_root() / key / "model.xml"
    if path.exists():
        try:
            model = ov.Core().read_model(path)
            stats["openvino_cache_hits"] = stats.get("openvino_cache_hits", 0) + 1
            return model
        except RuntimeError as exc:
            log.warning("openvino cache entry %s is unreadable (%s); rebuilding it", path.parent, exc)
            shutil.rmtree(path.parent, ignore_errors=True)
    with quiet_build():
        model = build()
    stats["openvino_builds"] = stats.get("openvino_builds", 0) + 1
    try:
        path.parent.parent.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=path.parent.parent))
    except OSError as exc:  # the cache folder is not a folder this process can write
        log.warning(
            "The OpenVINO cache folder %s cannot be written (%s): this conversion is used without being "
            "stored, and the next call converts again.",
            path.parent.parent,
            exc,
        )
        stats["openvino_not_cached"] = stats.get("openvino_not_cached", 0) + 1
        return model
    try:
        # compress_to_fp16=False: the stored model computes exactly what the converted one does.
        ov.save_model(model, scratch / "model.xml", compress_to_fp16=False)
        os.replace(scratch, path.parent)
    except OSError as exc:  # another process stored the same entry first, or the disk is full
        log.warning("openvino cache entry %s not written (%s)", path.parent, exc)
        return model
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    del model
    return ov.Core().read_model(path)


@contextlib.contextmanager
def quiet_build() -> Iterator[None]:
    """A build without the libraries' chatter: torch's tracer warnings (diffusers' and transformers' shape
    checks, read once per traced shape), deprecation notes raised while tracing, and NNCF's INFO lines (its
    statistics tables, ignored-node lists); NNCF's warnings and progress bars still show."""
    with warnings.catch_warnings(), at_least(logging.WARNING, "nncf"):
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        warnings.simplefilter("ignore", FutureWarning)
        yield


def convert(module: torch.nn.Module, inputs: tuple[torch.Tensor, ...]) -> Any:
    """`module(*inputs)` as an OpenVINO model with these inputs' static shapes and dtypes."""
    ov = openvino()
    shapes = [
        (ov.PartialShape(list(t.shape)), ov.Type.f32 if t.is_floating_point() else ov.Type.i64)
        for t in inputs
    ]
    with torch.no_grad():
        return ov.convert_model(module.eval(), example_input=inputs, input=shapes)


def compress_weights(model: Any) -> Any:
    """8-bit weights (INT8_ASYM, per output channel) for every MatMul and Convolution; no data needed."""
    return nncf().compress_weights(model)


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
        conv = ops.convolution(
            tokens, ops.constant(matrix[:, :, None, None].copy()), [1, 1], [0, 0], [0, 0], [1, 1]
        )
        conv.set_friendly_name(f"{name}/as_convolution")
        back = ops.reshape(conv, [*dims[:-1], matrix.shape[0]], False)
        op.output(0).replace(back.output(0))
        count += 1
    model.validate_nodes_and_infer_types()
    return count


def output_name(model: Any, name: str = "prediction") -> str:
    """The name of `model`'s first output tensor, which is given `name` if it has none (NNCF's engine returns
    a model's outputs by tensor name and leaves out those without one)."""
    tensor = model.output(0).get_tensor()
    if not tensor.get_names():
        tensor.set_names({name})
    return sorted(tensor.get_names())[0]


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


def compile_for_cpu(model: Any, precision: str, profile: bool = False, threads: int | None = None) -> Any:
    """Compile for the CPU with `threads` (default: torch's thread count), one stream, latency first.
    `precision` "f32" keeps fp32 math; "auto" leaves OpenVINO's default (bf16 on CPUs with AMX or
    AVX512-BF16, f32 elsewhere). `profile`: keep the plugin's per-node counters (`profiling_info`)."""
    ov = openvino()
    config: dict[str, Any] = {
        "PERFORMANCE_HINT": "LATENCY",
        "NUM_STREAMS": "1",
        "INFERENCE_NUM_THREADS": threads or torch.get_num_threads(),
    }
    if precision == "f32":
        config["INFERENCE_PRECISION_HINT"] = "f32"
    if profile:
        config["PERF_COUNT"] = "YES"
    return ov.Core().compile_model(model, "CPU", config)
