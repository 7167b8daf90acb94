"""Dynamic int8 quantization of the UNet's Linear layers with torchao.

`Int8DynamicActivationInt8WeightConfig`: weights are stored in int8 (per-row scales),
activations are quantized per token at run time, the matmul runs in int8. Convolutions
stay in floating point. torchao replaces each Linear's `weight` Parameter and sets an
instance `extra_repr`; both originals are kept here (references, no copies) and put back
on revert, so removal is exact without a rebuild. `set_inductor_config=False` keeps
torchao from changing torch.compile's global settings behind the studio's back.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Iterator
from typing import Any

import torch

from studio.errors import UnavailableError
from studio.optimizations.base import Context, Optimization, register

_MISSING = object()


def _torchao_quantization() -> Any:
    try:
        return importlib.import_module("torchao.quantization")
    except ImportError as exc:
        raise UnavailableError(
            f"int8_dynamic could not import torchao ({exc}); pip install -r requirements-extras.txt."
        ) from exc


def quantize_unet(pipe: Any, ctx: Context) -> None:
    """Quantize every `nn.Linear` of `pipe.unet` to dynamic int8, keeping the float weights for revert."""
    tq = _torchao_quantization()
    linears = [m for m in pipe.unet.modules() if isinstance(m, torch.nn.Linear)]
    saved = [(m, m.weight, m.__dict__.get("extra_repr", _MISSING)) for m in linears]
    tq.quantize_(pipe.unet, tq.Int8DynamicActivationInt8WeightConfig(set_inductor_config=False))
    ctx.state["int8_dynamic"] = saved


def dequantize_unet(pipe: Any, ctx: Context) -> None:
    """Put the original float weights (the very same Parameter objects) back."""
    for module, weight, extra_repr in ctx.state.pop("int8_dynamic", []):
        module.weight = weight
        if extra_repr is _MISSING:
            module.__dict__.pop("extra_repr", None)
        else:
            module.extra_repr = extra_repr


@contextlib.contextmanager
def float_weights(pipe: Any, ctx: Context) -> Iterator[None]:
    """Float weights for the duration of the block when int8_dynamic is applied (to change the layers),
    then quantized again, covering any Linear layers added meanwhile."""
    if "int8_dynamic" not in ctx.state:
        yield
        return
    dequantize_unet(pipe, ctx)
    try:
        yield
    finally:
        quantize_unet(pipe, ctx)


register(
    Optimization(
        name="int8_dynamic",
        label="int8 dynamic quantization",
        group="precision",
        description=(
            "Quantize the UNet's Linear layers to int8 with dynamically quantized int8 activations "
            "(torchao); convolutions stay in floating point."
        ),
        requires=("module:torchao", "family:sd|sdxl"),
        conflicts=("jit_trace_unet",),
        apply=quantize_unet,
        revert=dequantize_unet,
        order=60,
    )
)
