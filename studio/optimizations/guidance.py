"""Classifier-free guidance cut-off: stop guiding after a fraction of the steps.

With guidance, every denoising step runs the UNet on a batch of two (unconditional and
conditional). The layout, colours and shapes of a picture are settled in the first, noisy
steps; the late steps refine detail, where guidance matters least. After `after` of the
steps this technique drops the unconditional half (the prompt embeddings, SDXL's pooled
text embeddings and time ids, SD3's pooled embeddings), and sets the guidance scale to 0 so the pipeline stops
doubling the batch: each remaining step costs one UNet sample instead of two. This is the
"dynamic classifier-free guidance" recipe of the diffusers documentation (pipeline
callbacks), as a registry entry with its fraction as a parameter.

It changes the image (less guided detail), so it is judged like step caching: by PSNR/SSIM
and prompt fidelity against the baseline. It acts through the step callback, so it needs
nothing to revert; a run without it is untouched.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from studio import checks
from studio.optimizations.base import Context, Optimization, Settings, register
from studio.optimizations.facts import NO_MEMORY_EFFECT

GUIDED_TENSORS = ("prompt_embeds", "add_text_embeds", "add_time_ids", "pooled_prompt_embeds")


@dataclass(frozen=True)
class CfgCutoffSettings(Settings):
    """`after`: the fraction of the steps after which guidance stops (1.0 = never)."""

    after: float = 0.5

    def __post_init__(self) -> None:
        self._set("after", checks.number("cfg_cutoff after", self.after, 0.05, 1.0))


def cutoff_step(steps: int, after: float) -> int:
    """Index of the first unguided step for a run of `steps` steps (at least one guided step)."""
    return max(1, min(steps, round(steps * after)))


def _drop_guidance(pipe: Any, i: int, ctx: Context, tensors: dict) -> dict:
    """At the end of the last guided step, keep the conditional half and turn guidance off."""
    after = ctx.settings("cfg_cutoff").after
    if not pipe.do_classifier_free_guidance or i + 1 != cutoff_step(pipe.num_timesteps, after):
        return tensors
    for name in GUIDED_TENSORS:
        if name in tensors:
            tensors[name] = tensors[name].chunk(2)[-1]
    pipe._guidance_scale = 0.0
    ctx.stats["unguided_steps"] = pipe.num_timesteps - (i + 1)
    return tensors


register(
    Optimization(
        name="cfg_cutoff",
        label="guidance cut-off",
        group="speed",
        description=(
            "Stop classifier-free guidance after a fraction of the steps (parameter `after`): the remaining "
            "steps run the denoiser on one sample instead of two. Changes the image slightly; judge it by "
            "fidelity and PSNR."
        ),
        stage="call",
        requires=("family:sd|sdxl|sd3",),
        reasons={"family": "has no unconditional half to drop: Flux.1-dev is guidance-distilled"},
        step_end=_drop_guidance,
        step_tensors=GUIDED_TENSORS,
        settings=CfgCutoffSettings,
        autotune="candidate",
        grid=({"after": 0.3}, {"after": 0.5}, {"after": 0.75}),
        presets=(),
        ladder_rung=None,
        memory_effect=NO_MEMORY_EFFECT,
    )
)
