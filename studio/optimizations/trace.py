"""The traced-UNet technique (jit_trace_unet): a torch.jit.trace of the UNet per input shape."""

from __future__ import annotations

import gc
import logging
import warnings

import torch

from studio.optimizations import kept
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


log = logging.getLogger(__name__)


@kept.on_release
def forget_dropped_traces() -> None:
    """Empty TorchScript's process-wide compilation unit once no scripted module is alive.

    torch.jit.trace registers each traced module's methods (and the plans its executor optimizes) there and
    never removes them, whoever still uses them: ~25 MB per trace of the bundled model's UNet stay after the
    trace is gone. Only the whole unit can be emptied, which would break a scripted module still alive, so it
    is emptied only when none is.
    """
    if not torch.jit._state._python_cu.get_functions():
        return
    if any(issubclass(type(o), torch.jit.ScriptModule) for o in gc.get_objects()):
        return
    torch._C._jit_clear_class_registry()
    log.info("emptied TorchScript's compilation unit: no traced module is alive")


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
