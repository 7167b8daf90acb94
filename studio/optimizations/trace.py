"""The traced-UNet technique (jit_trace_unet): a torch.jit.trace of the UNet per input shape."""

from __future__ import annotations

import warnings

import torch

from studio.optimizations.base import JUST_IN_TIME, Context, Optimization, register
from studio.optimizations.denoiser import restore_denoiser, swap_denoiser
from studio.optimizations.facts import DEFAULTS_ONLY, NO_MEMORY_EFFECT, LadderRung, Preset
from studio.optimizations.per_shape import PerShapeUNet


class TracedUNet(PerShapeUNet):
    """A torch.jit.trace of the UNet per input shape."""

    def build(self, inputs: tuple[torch.Tensor, ...]) -> torch.jit.ScriptModule:
        # The tracer warns of every Python branch on a tensor in diffusers' UNet (the shape checks, the
        # timestep's dtype): expected for a trace per input shape, and not for the user's terminal.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", torch.jit.TracerWarning)
            return torch.jit.trace(self._plain, inputs, check_trace=False)


def _traced(unet: torch.nn.Module, ctx: Context) -> torch.nn.Module:
    return TracedUNet(unet.eval(), ctx.stats)


register(
    Optimization(
        name="jit_trace_unet",
        label="traced UNet",
        group="speed",
        description="Replace the UNet by a torch.jit.trace of it (one trace per input shape).",
        requires=("family:sd", "kept-across-requests"),
        reasons={
            "family": "traces an SD 1.x UNet (no extra conditioning); use torch_compile elsewhere",
            "kept-across-requests": JUST_IN_TIME,
        },
        conflict_reason="both replace the UNet's call with a graph of their own; one at a time",
        conflicts=("torch_compile",),
        reversible=False,
        apply=swap_denoiser(_traced),
        revert=restore_denoiser,
        order=80,
        autotune="candidate",
        grid=DEFAULTS_ONLY,
        presets=(
            Preset(70, ("jit_trace_unet",)),
            Preset(80, ("bf16", "channels_last", "jit_trace_unet")),
        ),
        ladder_rung=LadderRung(60, "traced UNet"),
        memory_effect=NO_MEMORY_EFFECT,
    )
)
