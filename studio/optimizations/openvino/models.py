"""OpenVINO models of a pipeline's parts: conversion, 8-bit weights, hybrid int8, and the disk cache.

A part (UNet, VAE decoder, text encoder) is converted by OpenVINO's PyTorch frontend (`convert_model`'s
steps) for the exact input shapes of a call (static shapes: no shape-dependent branch of the PyTorch code
is baked in for another size, and the CPU plugin runs static shapes fastest), then optionally compressed
with NNCF:
- "int8_weights": 8-bit weights (per output channel, asymmetric), activations stay float;
- "hybrid_int8": the recipe optimum-intel uses for diffusion UNets: 8-bit weights for the Linear layers,
  and static int8 (weights and activations, calibrated) for the convolutions and the attention matmuls,
  the first convolution kept float;
- "full_int8": static int8 for the Linear layers too: as int8 MatMuls on CPUs with VNNI or AMX, or,
  elsewhere, as 1x1 convolutions over the tokens, on the CPU plugin's int8 convolution kernels (its int8
  matmul is no faster than fp32 there; the convolutions, one 1x1 image per token, are slower than int8
  MatMuls where VNNI is). The recipes are in `openvino.int8`.
An fp32 model's 3x3 convolutions can be rewritten as Winograd's minimal filtering (`openvino.winograd`).
Converting and calibrating cost a first call (minutes for SD 1.5); the result is written under
`$STUDIO_HOME/openvino/`, keyed by the part's weights, the shapes, the mode, the calibration and the
library versions, so a later process reads it back, and its compile too, in a fraction of that
(`openvino.cache`).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import json
import logging
import sys
import warnings
from collections.abc import Iterator
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
    from studio.optimizations.openvino import patterns
    from studio.optimizations.openvino import (
        statistics as openvino_statistics,  # it builds nodes with `opset`
    )

    openvino_statistics.install()  # the models it infers for statistics: cheaper, computing the same
    patterns.install()  # its search for fusing patterns: among candidate nodes only, the same matches
    return lib


def cache_root() -> Path:
    return studio_settings.home() / "openvino"


def fingerprint(module: torch.nn.Module) -> str:
    """A digest of a module's class, parameter names, shapes and a sample of each tensor's values, and the
    scales of the LoRAs on it: the same weights give the same digest, other weights (almost surely) another
    one, in milliseconds for SD 1.5."""
    digest = hashlib.sha256(type(module).__qualname__.encode())
    for name, tensor in module.state_dict().items():
        flat = tensor.detach().reshape(-1)
        stride = max(1, flat.numel() // 64)
        digest.update(f"{name}{tuple(tensor.shape)}{tensor.dtype}".encode())
        digest.update(flat[::stride][:64].to(torch.float64).cpu().numpy().tobytes())
    for name, layer in module.named_modules():  # a LoRA's scale is no tensor: peft keeps it per layer
        if isinstance(getattr(layer, "scaling", None), dict):
            digest.update(f"{name}{sorted(layer.scaling.items())}".encode())
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
    """`module(*inputs)` as an OpenVINO model with these inputs' static shapes and dtypes: the steps of
    OpenVINO's `convert_model` for a PyTorch module, but two. The module is traced once: the default trace
    checks itself by tracing and running the module twice more (for SD 1.5's UNet at 256x256, 21 s against
    13 s on a 2-core CPU, the same graph). And no pre-processing step: the studio adds no layout, mean or
    scale, and building none took 3-4 s of that UNet's 10 s conversion (4.5 s without; the same model)."""
    ov = openvino()
    decoders = importlib.import_module("openvino.frontend.pytorch.ts_decoder")
    passes = importlib.import_module("openvino._offline_transformations")
    with torch.no_grad():
        traced = decoders.TorchScriptPythonDecoder(
            module.eval(), example_input=inputs, trace_kwargs={"check_trace": False}
        )
        frontend = ov.frontend.FrontEndManager().load_by_framework("pytorch")
        loaded = frontend.load(traced)
        for place, tensor in zip(loaded.get_inputs(), inputs, strict=True):
            loaded.set_partial_shape(place, ov.PartialShape(list(tensor.shape)))
            loaded.set_element_type(place, ov.Type.f32 if tensor.is_floating_point() else ov.Type.i64)
        model = frontend.convert(loaded)
    passes.apply_moc_transformations(model, cf=False, smart_reshape=True)
    passes.compress_quantize_weights_transformation(model)
    passes.apply_fused_names_cleanup(model)
    return model


def compress_weights(model: Any) -> Any:
    """8-bit weights (INT8_ASYM, per output channel) for every MatMul and Convolution; no data needed."""
    return nncf().compress_weights(model)


def output_name(model: Any, name: str = "prediction") -> str:
    """The name of `model`'s first output tensor, which is given `name` if it has none (NNCF's engine returns
    a model's outputs by tensor name and leaves out those without one)."""
    tensor = model.output(0).get_tensor()
    if not tensor.get_names():
        tensor.set_names({name})
    return sorted(tensor.get_names())[0]


def cpu_config(precision: str, threads: int | None = None, profile: bool = False) -> dict[str, Any]:
    """The CPU plugin's configuration of a compile: `threads` (default: torch's thread count), one stream,
    latency first. `precision` "f32" keeps fp32 math; "auto" leaves OpenVINO's default (bf16 on CPUs with
    AMX or AVX512-BF16, f32 elsewhere). `profile`: keep the plugin's per-node counters (`profiling_info`)."""
    config: dict[str, Any] = {
        "PERFORMANCE_HINT": "LATENCY",
        "NUM_STREAMS": "1",
        "INFERENCE_NUM_THREADS": threads or torch.get_num_threads(),
    }
    if precision == "f32":
        config["INFERENCE_PRECISION_HINT"] = "f32"
    if profile:
        config["PERF_COUNT"] = "YES"
    return config


def compile_for_cpu(
    model: Any, precision: str, profile: bool = False, threads: int | None = None, weightless: bool = False
) -> Any:
    """Compile `model` (an OpenVINO model, or the path of a stored one) for the CPU (`cpu_config`).
    `weightless` (a stored model): its `export_model` leaves out the weights the compile keeps as they are
    (OpenVINO's `CACHE_MODE=OPTIMIZE_SIZE`): `import_for_cpu` reads them from the model's own file."""
    config = cpu_config(precision, threads, profile)
    if weightless:
        config["CACHE_MODE"] = "OPTIMIZE_SIZE"
    return openvino().Core().compile_model(model, "CPU", config)


def import_for_cpu(blob: Any, weights: Path, precision: str, threads: int | None = None) -> Any:
    """A weightless compile's export (`blob`, an `openvino.Tensor` of its bytes) imported for the CPU with
    `threads`, whatever thread count it was compiled with, its other weights read from `weights` (the stored
    model's .bin). The compiled model reads `blob`'s memory as long as it lives: the caller keeps it."""
    config = {**cpu_config(precision, threads), "CACHE_MODE": "OPTIMIZE_SIZE", "WEIGHTS_PATH": str(weights)}
    return openvino().Core().import_model(blob, "CPU", config)
