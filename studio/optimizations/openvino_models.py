"""OpenVINO models of a pipeline's parts: conversion, 8-bit weights, hybrid int8, and the disk cache.

A part (UNet, VAE decoder, text encoder) is converted with OpenVINO's own `convert_model` for the exact
input shapes of a call (static shapes: no shape-dependent branch of the PyTorch code is baked in for
another size, and the CPU plugin runs static shapes fastest), then optionally compressed with NNCF:
- "int8_weights": 8-bit weights (per output channel, asymmetric), activations stay float;
- "hybrid_int8": the recipe optimum-intel uses for diffusion UNets: 8-bit weights for the Linear layers,
  and static int8 (weights and activations, calibrated) for the convolutions and the attention matmuls,
  the first convolution kept float;
- "full_int8": hybrid's quantization of a UNet whose Linear layers were first rewritten as 1x1
  convolutions over the tokens (`linears_as_convolutions`), so that they run in static int8 too, on the
  CPU plugin's int8 convolution kernels (its int8 matmul is no faster than fp32 on CPUs without VNNI).
An fp32 model's 3x3 convolutions can be rewritten as Winograd's minimal filtering (`winograd_convolutions`):
fewer multiplies, the same result to fp32 rounding, each shape's form timed on the CPU.
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
import re
import shutil
import sys
import tempfile
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from studio import settings as studio_settings
from studio.errors import UnavailableError
from studio.optimizations._quiet import at_least

log = logging.getLogger(__name__)

MODES = ("fp32", "int8_weights", "hybrid_int8", "full_int8")
CALIBRATED = ("hybrid_int8", "full_int8")  # the modes whose UNet has int8 activations
OVERFLOW_FIXES = ("enable", "first_layer_only", "disable")  # nncf.OverflowFix's values


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


def nncf() -> Any:
    openvino()  # first: usage reporting blocked before nncf is imported
    try:
        return importlib.import_module("nncf")
    except ImportError as exc:
        raise UnavailableError(
            f"openvino's int8 modes need nncf, which could not be imported ({exc})."
        ) from exc


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
    path.parent.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=path.parent.parent))
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
    ops = importlib.import_module(f"{openvino().__name__}.opset13")
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


# Winograd's minimal filtering F(m x m, 3 x 3) (Lavin and Gray, "Fast Algorithms for Convolutional Neural
# Networks", 2016): an m x m block of a 3x3 convolution's output from an a x a tile of its input
# (a = m + 2) with a*a products per channel pair instead of 9*m*m: Y = A^T [(G g G^T) * (B^T d B)] A, with
# B^T, G and A^T below for m = 2 and m = 4.
WINOGRAD = {
    2: (
        [[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]],
        [[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]],
        [[1, 1, 1, 0], [0, 1, -1, -1]],
    ),
    4: (
        [
            [4, 0, -5, 0, 1, 0],
            [0, -4, -4, 1, 1, 0],
            [0, 4, -4, -1, 1, 0],
            [0, -2, -1, 2, 1, 0],
            [0, 2, -1, -2, 1, 0],
            [0, 4, 0, -5, 0, 1],
        ],
        [
            [1 / 4, 0, 0],
            [-1 / 6, -1 / 6, -1 / 6],
            [-1 / 6, 1 / 6, -1 / 6],
            [1 / 24, 1 / 12, 1 / 6],
            [1 / 24, -1 / 12, 1 / 6],
            [0, 0, 1],
        ],
        [[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0], [0, 1, -1, 8, -8, 1]],
    ),
}


def winograd_shape(op: Any) -> tuple[int, ...] | None:
    """(N, C_in, C_out, H, W) of a Convolution Winograd's F(m, 3) can replace: fp32, a constant 3x3 kernel,
    stride and dilation 1, padding 1 on every side, static shapes; None for any other."""
    if (
        op.get_type_name() != "Convolution"
        or op.input_value(1).get_node().get_type_name() != "Constant"
        or op.get_output_element_type(0).get_type_name() != "f32"
    ):
        return None
    attributes = op.get_attributes()
    kernel = op.input_value(1).get_partial_shape()
    source = op.input_value(0).get_partial_shape()
    if source.is_dynamic or kernel.is_dynamic or source.rank.get_length() != 4:
        return None
    n, c, h, w = (d.get_length() for d in source)
    out, _, kh, kw = (d.get_length() for d in kernel)
    plain = (
        list(attributes["strides"]) == [1, 1]
        and list(attributes["dilations"]) == [1, 1]
        and list(attributes["pads_begin"]) == [1, 1]
        and list(attributes["pads_end"]) == [1, 1]
        and attributes["auto_pad"] == "explicit"
    )
    return (n, c, out, h, w) if plain and (kh, kw) == (3, 3) else None


# A form of a 3x3 convolution: Winograd's F(m, 3) over the whole image (rows None) or in horizontal strips
# of `rows` output rows, each strip's transformed tiles small enough to stay in the CPU's cache (on the AVX2
# EPYC, SD 1.5's VAE decoder at 256x256 ran 1.2-1.3x faster with its 128x128 and larger layers in strips).
Form = tuple[int, int | None]
FORMS: tuple[Form, ...] = ((2, None), (4, None), (4, 8), (4, 4))
MARGIN = 0.9  # a Winograd form replaces the direct convolution only when it takes under 90% of its time
# part of a rewritten model's cache key: a change to the chooser or to the graph the forms build (`products`
# names its layout) builds the models again
CHOOSER = {"forms": FORMS, "margin": MARGIN, "products": "images side by side, A^T M A by MatMul"}


def _winograd_tiles(source: Any, transforms: tuple[Any, Any, Any], m: int, pad: int) -> Any:
    """F(m, 3) of `source` [N, C, H, W] with `transforms` (constant nodes, shared by every strip): the input
    transform's kernels, the transformed weights [a*a, C_out, C] and the output transform [m*m, a*a];
    padding 1 on every side, or none (`pad` 0: `source` carries its border, so the output is 2 smaller)."""
    ops = importlib.import_module(f"{openvino().__name__}.opset13")
    inward, u, outward = transforms
    a = m + 2
    n, c, h, w = (d.get_length() for d in source.get_partial_shape())
    out = u.get_output_partial_shape(0)[1].get_length()
    oh, ow = h - 2 + 2 * pad, w - 2 + 2 * pad
    tiles = (oh // m) * (ow // m)
    planes = ops.reshape(source, [n * c, 1, h, w], False)
    v = ops.convolution(planes, inward, [m, m], [pad, pad], [(a - m - 1) * pad] * 2, [1, 1])
    # the batch's images side by side in one product per tile position: each transformed weight read once
    v = ops.transpose(ops.reshape(v, [n, c, a * a, tiles], False), ops.constant(np.array([2, 1, 0, 3])))
    products = ops.matmul(u, ops.reshape(v, [a * a, c, n * tiles], False), False, False)
    # the output transform on the products as they lie: [m*m, a*a] by [a*a, C_out*N*tiles]
    blocks = ops.matmul(outward, ops.reshape(products, [a * a, out * n * tiles], False), False, False)
    blocks = ops.transpose(
        ops.reshape(blocks, [m * m, out, n, tiles], False), ops.constant(np.array([2, 1, 0, 3]))
    )
    blocks = ops.reshape(blocks, [n, out * m * m, oh // m, ow // m], False)
    return ops.depth_to_space(blocks, "depth_first", m)  # [N, C_out, oh, ow]


def winograd_convolution(source: Any, weight: Any, m: int, rows: int | None = None) -> Any:
    """`source` [N, C, H, W] (H and W multiples of m) convolved with `weight` [C_out, C, 3, 3] (a numpy
    array; stride 1, padding 1) by F(m x m, 3 x 3), built of the CPU plugin's fast nodes: the input
    transform B^T d B as a stride-m convolution of each channel alone (one input channel, a*a fixed
    kernels), the products as one batched MatMul per tile position ([C_out, C] by [C, N*tiles]), the output
    transform A^T M A as one MatMul to m*m values per tile and channel, then DepthToSpace. With `rows` (a
    multiple of m dividing H), the image padded once and cut into strips of `rows` output rows (each with its
    two border rows), each strip transformed, multiplied and transformed back alone, then joined. Returns the
    output node."""
    ops = importlib.import_module(f"{openvino().__name__}.opset13")
    bt, g, at = (np.array(x, dtype=np.float64) for x in WINOGRAD[m])
    a = m + 2
    c, h = (source.get_partial_shape()[i].get_length() for i in (1, 2))
    u = (g @ weight.astype(np.float64) @ g.T).transpose(2, 3, 0, 1).reshape(a * a, weight.shape[0], c)
    transforms = tuple(
        ops.constant(x.astype(np.float32))
        for x in (
            np.einsum("ki,lj->klij", bt, bt).reshape(a * a, 1, a, a),  # B^T d B, per tile
            u,  # G g G^T
            np.einsum("xk,yl->xykl", at, at).reshape(m * m, a * a),  # A^T M A
        )
    )
    if rows is None or rows >= h:
        return _winograd_tiles(source, transforms, m, pad=1)
    border = ops.constant(np.array([0, 0, 1, 1]))
    padded = ops.pad(source, border, border, "constant")
    strips = []
    for top in range(0, h, rows):
        strip = ops.slice(padded, *(ops.constant(np.array(x)) for x in ([top], [top + rows + 2], [1], [2])))
        strips.append(_winograd_tiles(strip.output(0), transforms, m, pad=0))
    return ops.concat(strips, 2)


def fits(form: Form, h: int, w: int) -> bool:
    """Whether a form's tiles (and strips) divide an H x W image."""
    m, rows = form
    return not (h % m or w % m) and (rows is None or (rows % m == 0 and h % rows == 0 and h > rows))


def fastest_convolution(shape: tuple[int, ...], calls: int = 5) -> Form | None:
    """Which of the direct convolution (None) and the `FORMS` of Winograd's (F(2, 3), F(4, 3), F(4, 3) in
    strips) runs a 3x3 convolution of `shape` (N, C_in, C_out, H, W) fastest on this CPU, as part of a
    network: each compiled alone as the technique compiles (f32) and run on random data, interleaved, timed by
    the plugin's own counters, the best of `calls` each. Inside a network the direct convolution gets its
    input in the plugin's blocked layout from its neighbours and hands its output on so, while a Winograd
    form needs the plain layout in and out; so the direct one counts without the reorders it pays alone, and
    a Winograd form with them added. A Winograd form is chosen only when it takes under `MARGIN` of the
    direct one's time: the estimate is rough, and a close call keeps the direct convolution."""
    ov = openvino()
    ops = importlib.import_module(f"{ov.__name__}.opset13")
    n, c, out, h, w = shape
    rng = np.random.default_rng(0)
    weight = (rng.standard_normal((out, c, 3, 3)) / math.sqrt(9 * c)).astype(np.float32)
    data = rng.standard_normal((n, c, h, w)).astype(np.float32)
    variants: dict[Form | None, Any] = {}
    for form in (None, *(f for f in FORMS if fits(f, h, w))):
        source = ops.parameter([n, c, h, w], np.float32)
        node = (
            ops.convolution(source, ops.constant(weight), [1, 1], [1, 1], [1, 1], [1, 1])
            if form is None
            else winograd_convolution(source.output(0), weight, *form)
        )
        model = ov.Model([node], [source])
        variants[form] = compile_for_cpu(model, "f32", profile=True).create_infer_request()
    best: dict[Form | None, float] = dict.fromkeys(variants, math.inf)
    for request in variants.values():
        request.infer([data])  # warm-up
    for _ in range(calls):
        for request in variants.values():
            request.infer([data])
        reorders, own = _split_reorders(variants[None])
        best[None] = min(best[None], own)
        for form in variants.keys() - {None}:
            best[form] = min(best[form], sum(_split_reorders(variants[form])) + reorders)
    fastest = min(best, key=lambda f: best[f])
    return fastest if best[fastest] < MARGIN * best[None] else None


def _split_reorders(request: Any) -> tuple[float, float]:
    """Seconds of a request's last call in layout reorders, and in everything else (the plugin's counters)."""
    reorders = rest = 0.0
    for node in request.profiling_info:
        seconds = node.real_time.total_seconds()
        if node.node_type == "Reorder":
            reorders += seconds
        else:
            rest += seconds
    return reorders, rest


def _form_name(form: Form) -> str:
    m, rows = form
    return f"F({m},3)" if rows is None else f"F({m},3) in strips of {rows} rows"


def _form_suffix(form: Form) -> str:
    m, rows = form
    return f"/winograd_f{m}" if rows is None else f"/winograd_f{m}_strips{rows}"


def winograd_convolutions(model: Any, choose: Callable[[tuple[int, ...]], Form | None]) -> Any:
    """Rewrites, in place, each 3x3 convolution `winograd_shape` accepts in the form `choose(shape)` says
    ((m, rows): F(m, 3), whole or in strips; None keeps the direct convolution). The same products and sums
    up to fp32 rounding (the transforms' constants add relative error of about 1e-5 for F(4, 3), 3e-6 for
    F(2, 3)). Returns the model (`winograd_counts` says how many convolutions took each form)."""
    found = [(op, shape) for op in model.get_ordered_ops() if (shape := winograd_shape(op)) is not None]
    found.reverse()
    while found:  # popped: a replaced convolution and its weights are freed as the rewrite goes
        op, shape = found.pop()
        form = choose(shape)
        if form is None or not fits(form, shape[3], shape[4]):
            continue
        weight = op.input_value(1).get_node().get_data()
        replacement = winograd_convolution(op.input_value(0), weight, *form)
        replacement.set_friendly_name(op.get_friendly_name() + _form_suffix(form))
        op.output(0).replace(replacement.output(0))
        del op, weight, replacement
    model.validate_nodes_and_infer_types()
    return model


def winograd_counts(model: Any) -> dict[str, int]:
    """How many convolutions of `model` (rewritten now, or read back from the cache) took each form."""
    counts: dict[str, int] = {}
    for op in model.get_ops():
        found = re.search(r"/winograd_f(\d+)(?:_strips(\d+))?$", op.get_friendly_name())
        if found:
            name = _form_name((int(found[1]), int(found[2]) if found[2] else None))
            counts[name] = counts.get(name, 0) + 1
    return counts


def hybrid_quantize(
    model: Any, calibration: list[dict[str, Any]], overflow_fix: str = "first_layer_only"
) -> Any:
    """optimum-intel's hybrid int8 for diffusion UNets: 8-bit weights for the MatMuls with weights (Linear
    layers), then static int8 calibrated on `calibration` (the model's inputs by name, numpy arrays) for
    the rest: convolutions and attention's activation-activation MatMuls, SmoothQuant off, `conv_in` float.
    `overflow_fix` (one of OVERFLOW_FIXES) says which convolutions get 7-bit weights; optimum-intel leaves
    NNCF's default, "first_layer_only"."""
    lib = nncf()
    linear = [
        op.get_friendly_name()
        for op in model.get_ops()
        if op.get_type_name() == "MatMul" and (_constant_behind(op, 0) or _constant_behind(op, 1))
    ]
    first_conv = [
        op.get_friendly_name()
        for op in model.get_ops()
        if op.get_type_name() == "Convolution" and "conv_in" in op.get_friendly_name()
    ]
    compressed = lib.compress_weights(model, ignored_scope=lib.IgnoredScope(types=["Convolution"]))
    return lib.quantize(
        compressed,
        lib.Dataset(calibration),
        subset_size=len(calibration),
        model_type=lib.ModelType.TRANSFORMER,
        ignored_scope=lib.IgnoredScope(names=linear + first_conv, validate=False),
        advanced_parameters=lib.AdvancedQuantizationParameters(
            smooth_quant_alphas=lib.AdvancedSmoothQuantParameters(matmul=-1),
            overflow_fix=lib.OverflowFix(overflow_fix),
        ),
    )


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


def compile_for_cpu(model: Any, precision: str, profile: bool = False) -> Any:
    """Compile for the CPU with torch's thread count, one stream, latency first. `precision` "f32" keeps
    fp32 math; "auto" leaves OpenVINO's default (bf16 on CPUs with AMX or AVX512-BF16, f32 elsewhere).
    `profile`: keep the plugin's per-node counters (a request's `profiling_info`)."""
    ov = openvino()
    config: dict[str, Any] = {
        "PERFORMANCE_HINT": "LATENCY",
        "NUM_STREAMS": "1",
        "INFERENCE_NUM_THREADS": torch.get_num_threads(),
    }
    if precision == "f32":
        config["INFERENCE_PRECISION_HINT"] = "f32"
    if profile:
        config["PERF_COUNT"] = "YES"
    return ov.Core().compile_model(model, "CPU", config)
