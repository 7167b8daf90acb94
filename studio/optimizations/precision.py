"""Precision and backend flags: half-precision weights, TF32, cuDNN autotuner, autocast."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from studio.optimizations.base import Context, Optimization, register
from studio.optimizations.facts import DEFAULTS_ONLY, NO_MEMORY_EFFECT, LadderRung, Preset


@contextlib.contextmanager
def _backend_flag(obj: object, attr: str, value: bool) -> Iterator[None]:
    old = getattr(obj, attr)
    setattr(obj, attr, value)
    try:
        yield
    finally:
        setattr(obj, attr, old)


@contextlib.contextmanager
def _tf32(ctx: Context) -> Iterator[None]:
    with (
        _backend_flag(torch.backends.cuda.matmul, "allow_tf32", True),
        _backend_flag(torch.backends.cudnn, "allow_tf32", True),
    ):
        yield


def _cudnn_benchmark(ctx: Context) -> contextlib.AbstractContextManager:
    return _backend_flag(torch.backends.cudnn, "benchmark", True)


def autocast_dtype(device_type: str) -> torch.dtype:
    """fp16 on GPUs (as in the diffusers documentation), bf16 on CPU where autocast supports it."""
    return torch.bfloat16 if device_type == "cpu" else torch.float16


def _autocast(ctx: Context) -> contextlib.AbstractContextManager:
    return torch.autocast(ctx.device_type, dtype=autocast_dtype(ctx.device_type))


def computes_bf16(opt: Optimization, device_type: str) -> bool:
    """Whether technique `opt` turns a run's math to bf16 on `device_type`: weights loaded in bf16 anywhere,
    and autocast where `autocast_dtype` is bf16 (a CPU)."""
    autocast = opt.call_context is _autocast and autocast_dtype(device_type) == torch.bfloat16
    return opt.dtype == torch.bfloat16 or autocast


register(
    Optimization(
        name="fp16",
        label="fp16 weights",
        group="precision",
        description="Load the weights in float16: half the memory, faster on GPUs with tensor cores.",
        stage="load",
        requires=("accelerator",),
        conflict_reason="the weights take one precision at a time",
        conflicts=("bf16",),
        dtype=torch.float16,
        order=0,
        autotune="candidate",
        grid=DEFAULTS_ONLY,
        presets=(),
        ladder_rung=LadderRung(40, "fp16", fallback=("bf16",)),
        memory_effect=NO_MEMORY_EFFECT,
    )
)
register(
    Optimization(
        name="bf16",
        label="bf16 weights",
        group="precision",
        description=(
            "Load the weights in bfloat16: fp32's range at half the memory; fast on Ampere+ GPUs and on CPUs "
            "with AMX or AVX512-BF16; CPUs without them emulate it, many times slower than fp32."
        ),
        stage="load",
        conflict_reason="the weights take one precision at a time",
        conflicts=("fp16",),
        dtype=torch.bfloat16,
        order=0,
        autotune="candidate",
        grid=DEFAULTS_ONLY,
        presets=(Preset(10, ("bf16",)),),
        ladder_rung=None,  # the fallback of fp16's rung
        memory_effect=NO_MEMORY_EFFECT,
    )
)
register(
    Optimization(
        name="tf32",
        label="TF32 matmuls",
        group="precision",
        description="Let matmuls and convolutions use TensorFloat-32 on Ampere and newer GPUs.",
        stage="call",
        requires=("cuda", "ampere"),
        call_context=_tf32,
        autotune="candidate",
        grid=DEFAULTS_ONLY,
        presets=(),
        ladder_rung=None,
        memory_effect=NO_MEMORY_EFFECT,
    )
)
register(
    Optimization(
        name="cudnn_benchmark",
        label="cuDNN autotuner",
        group="speed",
        description="Benchmark cuDNN convolution algorithms for each input shape and keep the fastest.",
        stage="call",
        requires=("cuda",),
        call_context=_cudnn_benchmark,
        autotune="candidate",
        grid=DEFAULTS_ONLY,
        presets=(),
        ladder_rung=LadderRung(20, "cuDNN auto-tuner"),
        memory_effect=NO_MEMORY_EFFECT,
    )
)
register(
    Optimization(
        name="autocast",
        label="autocast",
        group="precision",
        description=(
            "Run under torch.autocast (fp16 on GPUs, bf16 on CPU): mixed precision without converting "
            "weights."
        ),
        stage="call",
        call_context=_autocast,
        autotune="candidate",
        grid=DEFAULTS_ONLY,
        presets=(Preset(60, ("autocast",)),),
        ladder_rung=LadderRung(30, "autocast"),
        memory_effect=NO_MEMORY_EFFECT,
    )
)
