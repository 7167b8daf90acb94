"""The attention kernel of a transformer, through diffusers' attention dispatcher (the attention_backend
technique).

`model.set_attention_backend(name)` gives every attention processor that dispatches (`_attention_backend`) the
named backend, `diffusers.models.attention_dispatch.AttentionBackendName` lists them (native SDPA and its
flash, efficient, cuDNN and math kernels, flash-attn 2/3, SageAttention, xFormers, flex, hub kernels...). It
also makes the backend diffusers' process-wide default, which would change every other pipeline in the studio:
that default is put back at once, and each processor keeps its own. Revert gives each processor the backend it
had.

Whether a backend runs here is asked of diffusers (its package requirements) and then of the backend itself:
one small attention on the request's device and dtype. A backend that cannot run is refused with the request,
in that sentence, before anything loads. In diffusers 0.42 only Flux's processors dispatch; UNets' and SD3's
call SDPA directly, so a backend changes nothing there.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import torch
from diffusers.models import attention_dispatch as dispatch

from studio import checks
from studio.errors import UnavailableError, first_line
from studio.optimizations.base import Context, Optimization, Settings, register
from studio.optimizations.denoiser import denoiser
from studio.optimizations.facts import NO_MEMORY_EFFECT

BACKENDS = tuple(b.value for b in dispatch.AttentionBackendName)
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
STATE = "attention_backend"  # [(processor, its backend before)] while applied
_CLASS_DEFAULT = object()  # a processor that had no backend of its own (its class's None)


@dataclass(frozen=True)
class AttentionBackendSettings(Settings):
    """`backend`: one of diffusers' attention dispatcher backends (native is torch's SDPA)."""

    backend: str = "native"

    def __post_init__(self) -> None:
        self._set("backend", checks.one_of("attention_backend backend", str(self.backend).lower(), BACKENDS))


@functools.cache
def backend_reason(backend: str, device: str, dtype: torch.dtype) -> str | None:
    """Why `backend` cannot run attention on `device` in `dtype` here, or None when one small call runs."""
    name = dispatch.AttentionBackendName(backend)
    try:
        dispatch._check_attention_backend_requirements(name)
    except RuntimeError as exc:
        return first_line(exc)
    try:
        q = torch.randn(1, 16, 2, 64, device=device, dtype=dtype)  # batch, tokens, heads, head dim
        with torch.no_grad():
            dispatch.dispatch_attention_fn(q, q, q, backend=name)
    except Exception as exc:  # noqa: BLE001 (any failure of the kernel is the reason it cannot run here)
        return f"its kernel fails on {device} in {str(dtype).removeprefix('torch.')}: {first_line(exc)}"
    return None


def refusal(backend: str, device: str, dtype: torch.dtype) -> str | None:
    """The sentence refusing `backend` on `device` in `dtype`, or None when it runs here."""
    reason = backend_reason(backend, device, dtype)
    return None if reason is None else f"attention_backend backend={backend} cannot run here: {reason}."


def settings_reason(settings: Settings, device: str, dtype: str) -> str | None:
    """`refusal` for a request's settings, device and precision name (checked at validation)."""
    return refusal(settings.backend, device, DTYPES.get(dtype, torch.float32))


def set_backend(pipe: Any, ctx: Context) -> None:
    """Give every dispatching attention processor of the denoiser the requested backend."""
    settings = ctx.settings("attention_backend")
    model = denoiser(pipe)
    # again on the weights' own dtype, which a precision technique may have set differently from the request's
    sentence = refusal(settings.backend, ctx.device, next(model.parameters()).dtype)
    if sentence is not None:
        raise UnavailableError(sentence)
    processors = [getattr(m, "processor", None) for m in model.modules()]
    processors = [p for p in processors if hasattr(p, "_attention_backend")]
    ctx.state[STATE] = [(p, p.__dict__.get("_attention_backend", _CLASS_DEFAULT)) for p in processors]
    default = dispatch._AttentionBackendRegistry._active_backend
    try:
        model.set_attention_backend(settings.backend)
    finally:
        dispatch._AttentionBackendRegistry.set_active_backend(default)


def reset_backend(pipe: Any, ctx: Context) -> None:
    """Each processor's backend back to what it was (its class's default where it had none of its own)."""
    for processor, before in ctx.state.pop(STATE, []):
        if before is _CLASS_DEFAULT:
            processor.__dict__.pop("_attention_backend", None)
        else:
            processor._attention_backend = before


register(
    Optimization(
        name="attention_backend",
        label="attention backend",
        group="speed",
        description=(
            "Choose a transformer's attention kernel with diffusers' attention dispatcher (setting "
            "backend: native SDPA, _native_flash, _native_math, flash, sage, xformers, flex, ...); backends "
            "that cannot run here are refused with the reason."
        ),
        requires=("family:flux",),
        reasons={
            "family": "switches diffusers' attention dispatcher, which only Flux's processors use in 0.42"
        },
        apply=set_backend,
        revert=reset_backend,
        settings=AttentionBackendSettings,
        settings_reason=settings_reason,
        order=20,
        autotune="candidate",
        # the auto-tuner leaves out those that cannot run on the request's device (`settings_reason`)
        grid=tuple(
            {"backend": b}
            for b in ("_native_flash", "_native_efficient", "_native_cudnn", "flash", "_flash_3", "sage")
        ),
        presets=(),
        ladder_rung=None,
        memory_effect=NO_MEMORY_EFFECT,
    )
)
