"""Weight quantization of the denoiser's Linear layers (UNet or transformer) with torchao.

- `int8_dynamic` (`Int8DynamicActivationInt8WeightConfig`): weights stored in int8 (per-row scales),
  activations quantized per token at run time, the matmul runs in int8.
- `int8_weight_only` (`Int8WeightOnlyConfig`): weights stored in int8 and dequantized for a floating-point
  matmul: half a bf16 model's weight memory, activations untouched.
- `fp8` (`Float8DynamicActivationFloat8WeightConfig`): weights and activations in float8 e4m3 with fp8 matmuls
  (`torch._scaled_mm`), which need fp8 tensor cores: NVIDIA compute capability 8.9 (Ada, Hopper) or newer.
  Setting `granularity`: one scale per tensor (`tensor`, torchao's default) or one per row of the weight and
  per token of the activation (`row`, the public Flux recipes' choice).

Convolutions stay in floating point. torchao replaces each Linear's `weight` Parameter and sets an instance
`extra_repr`; both originals are kept here (references, no copies) and put back on revert, so removal is exact
without a rebuild. `set_inductor_config=False` keeps torchao from changing torch.compile's global settings
behind the studio's back.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from studio import checks
from studio.errors import UnavailableError
from studio.optimizations.base import Context, Optimization, Settings, register
from studio.optimizations.denoiser import denoiser
from studio.optimizations.facts import DEFAULTS_ONLY, NO_MEMORY_EFFECT

_MISSING = object()
GRANULARITIES = ("tensor", "row")  # fp8's scales: torchao's PerTensor, PerRow


@dataclass(frozen=True)
class Fp8Settings(Settings):
    """`granularity`: one scale per tensor, or one per weight row and activation token ("row")."""

    granularity: str = "tensor"

    def __post_init__(self) -> None:
        self._set("granularity", checks.one_of("fp8 granularity", self.granularity, GRANULARITIES))


def _fp8_config(tq: Any, ctx: Context) -> Any:
    kind = tq.PerRow if ctx.settings("fp8").granularity == "row" else tq.PerTensor
    return tq.Float8DynamicActivationFloat8WeightConfig(granularity=kind(), set_inductor_config=False)


STATE = "quantized_linears"  # (technique, saved weights) in the pipeline's state while applied
# technique -> its torchao config (from torchao.quantization, for the request's settings)
CONFIGS: dict[str, Callable[[Any, Context], Any]] = {
    "int8_dynamic": lambda tq, ctx: tq.Int8DynamicActivationInt8WeightConfig(set_inductor_config=False),
    "int8_weight_only": lambda tq, ctx: tq.Int8WeightOnlyConfig(set_inductor_config=False),
    "fp8": _fp8_config,
}


def _torchao_quantization(name: str) -> Any:
    try:
        return importlib.import_module("torchao.quantization")
    except ImportError as exc:
        raise UnavailableError(
            f"{name} could not import torchao ({exc}); pip install -r requirements-extras.txt."
        ) from exc


def quantize(pipe: Any, ctx: Context, name: str) -> None:
    """Quantize every `nn.Linear` of the denoiser with technique `name`'s config, keeping the float weights
    for revert."""
    tq = _torchao_quantization(name)
    model = denoiser(pipe)
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    saved = [(m, m.weight, m.__dict__.get("extra_repr", _MISSING)) for m in linears]
    tq.quantize_(model, CONFIGS[name](tq, ctx))
    ctx.state[STATE] = (name, saved)


def _quantizer(name: str) -> Callable[[Any, Context], None]:
    def apply(pipe: Any, ctx: Context) -> None:
        quantize(pipe, ctx, name)

    return apply


def dequantize(pipe: Any, ctx: Context) -> None:
    """Put the original float weights (the very same Parameter objects) back."""
    _, saved = ctx.state.pop(STATE, (None, []))
    for module, weight, extra_repr in saved:
        module.weight = weight
        if extra_repr is _MISSING:
            module.__dict__.pop("extra_repr", None)
        else:
            module.extra_repr = extra_repr


@contextlib.contextmanager
def float_weights(pipe: Any, ctx: Context) -> Iterator[None]:
    """Float weights for the duration of the block when a quantization is applied (to change the layers),
    then quantized again, covering any Linear layers added meanwhile."""
    if STATE not in ctx.state:
        yield
        return
    name = ctx.state[STATE][0]
    dequantize(pipe, ctx)
    try:
        yield
    finally:
        quantize(pipe, ctx, name)


WEIGHTS = ("int8_dynamic", "int8_weight_only", "fp8")


def _register(
    name: str,
    label: str,
    description: str,
    requires: tuple[str, ...] = (),
    conflicts: tuple[str, ...] = (),
    settings: type[Settings] = Settings,
) -> None:
    """Register a weight quantizer: candidates of the auto-tuner at their defaults, in no preset or rung."""
    register(
        Optimization(
            name=name,
            label=label,
            group="precision",
            description=description,
            requires=("module:torchao", *requires),
            conflict_reason="the weights take one quantization at a time",
            conflict_reasons={
                "jit_trace_unet": "torch.jit cannot trace torchao's quantized tensors",
                "openvino": "OpenVINO converts the float model, and torchao's int8 tensors cannot be "
                "exported to it",
            },
            conflicts=("jit_trace_unet", *(w for w in WEIGHTS if w < name), *conflicts),
            apply=_quantizer(name),
            revert=dequantize,
            order=60,
            autotune="candidate",
            settings=settings,
            grid=DEFAULTS_ONLY,
            presets=(),
            ladder_rung=None,
            memory_effect=NO_MEMORY_EFFECT,
        )
    )


_register(
    "int8_dynamic",
    "int8 dynamic quantization",
    "Quantize the denoiser's Linear layers (UNet or transformer) to int8 with dynamically quantized int8 "
    "activations (torchao); convolutions stay in floating point.",
)
_register(
    "int8_weight_only",
    "int8 weight-only quantization",
    "Store the denoiser's Linear weights in int8 (per-row scales, torchao) and compute in the model's "
    "precision: less weight memory, activations untouched.",
    # OpenVINO's conversion traces the UNet, and torchao's Int8Tensor has no aten.view to trace
    conflicts=("openvino",),
)
_register(
    "fp8",
    "fp8 quantization",
    "Quantize the denoiser's Linear layers to float8 e4m3, weights and dynamically scaled activations, with "
    "fp8 matmuls (torchao); needs fp8 tensor cores. Setting granularity: one scale per tensor, or per weight "
    "row and activation token (row: the public Flux recipes' choice).",
    requires=("cuda", "fp8"),
    settings=Fp8Settings,
)
