"""Winograd's minimal filtering for an OpenVINO model's 3x3 convolutions: each one the CPU runs faster so is
rewritten, in the model's graph, as F(2, 3) or F(4, 3) (whole, or in strips of rows that stay in the cache),
built of the CPU plugin's fast nodes; fewer multiplies, the same result to fp32 rounding. Which form each
shape takes is timed on this CPU (`fastest_convolution`)."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

import numpy as np

from studio.optimizations.openvino.models import compile_for_cpu, openvino, opset

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
    ops = opset()
    inward, u, outward = transforms
    a = m + 2
    n, c, h, w = (d.get_length() for d in source.get_partial_shape())
    out = u.get_output_partial_shape(0)[1].get_length()
    oh, ow = h - 2 + 2 * pad, w - 2 + 2 * pad
    tiles = (oh // m) * (ow // m)
    planes = ops.reshape(source, [n * c, 1, h, w], False)
    v = ops.convolution(
        planes,
        inward,
        strides=[m, m],
        pads_begin=[pad, pad],
        pads_end=[(a - m - 1) * pad] * 2,
        dilations=[1, 1],
    )
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
    ops = opset()
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
    ov, ops = openvino(), opset()
    n, c, out, h, w = shape
    rng = np.random.default_rng(0)
    weight = (rng.standard_normal((out, c, 3, 3)) / math.sqrt(9 * c)).astype(np.float32)
    data = rng.standard_normal((n, c, h, w)).astype(np.float32)
    variants: dict[Form | None, Any] = {}
    for form in (None, *(f for f in FORMS if fits(f, h, w))):
        source = ops.parameter([n, c, h, w], np.float32)
        node = (
            ops.convolution(
                source,
                ops.constant(weight),
                strides=[1, 1],
                pads_begin=[1, 1],
                pads_end=[1, 1],
                dilations=[1, 1],
            )
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
