"""Memory layout of the UNet's weights: the channels_last technique (NHWC convolution weights)."""

from __future__ import annotations

from typing import Any

import torch

from studio.optimizations.base import Context, Optimization, register
from studio.optimizations.facts import DEFAULTS_ONLY, NO_MEMORY_EFFECT, LadderRung, Preset


def _relayout(memory_format: torch.memory_format):
    """Re-lay out the UNet's 4-D weights only (what `unet.to(memory_format=...)` changes), skipping
    the thousands of other tensors that `Module.to` would visit: switching stays cheap."""

    def switch(pipe: Any, ctx: Context) -> None:
        for module in pipe.unet.modules():
            for param in module.parameters(recurse=False):
                if param.dim() == 4 and not param.is_contiguous(memory_format=memory_format):
                    param.data = param.data.contiguous(memory_format=memory_format)

    return switch


_channels_last = _relayout(torch.channels_last)
_contiguous = _relayout(torch.contiguous_format)


register(
    Optimization(
        name="channels_last",
        label="channels last",
        group="speed",
        description="Store the UNet's 4-D tensors as NHWC, which many convolution kernels prefer.",
        requires=("family:sd|sdxl",),
        reasons={"family": "has no convolutions to speed up in a transformer"},
        apply=_channels_last,
        revert=_contiguous,
        order=10,
        autotune="candidate",
        grid=DEFAULTS_ONLY,
        presets=(Preset(20, ("channels_last",)), Preset(30, ("bf16", "channels_last"))),
        ladder_rung=LadderRung(50, "channels last"),
        memory_effect=NO_MEMORY_EFFECT,
    )
)
