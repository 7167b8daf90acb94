"""The registry's SD3 and Flux entries: the real architectures and their tiny variants, random weights
(`pipelines.transformer_architectures` builds them)."""

from __future__ import annotations

from typing import Any

from pipelines.spec import NOISE, ModelCost, PipelineSpec

SD3_COST = ModelCost(setup=25.0, step=0.2, pixels=1024 * 1024)
FLUX_COST = ModelCost(setup=40.0, step=0.5, pixels=1024 * 1024)
TINY_COST = ModelCost(setup=2.0, step=0.05, pixels=64 * 64, cpu_factor=1.5)


def _transformer_spec(name: str, family: str, label: str, tiny: bool, **kw: Any) -> PipelineSpec:
    """A random-weight SD3 or Flux pipeline (`pipelines.transformer_architectures`)."""
    side = 64 if tiny else 512
    return PipelineSpec(
        id=f"{name}-arch" if not tiny else name,
        source=f"arch:{name}",
        pipeline_class="StableDiffusion3Pipeline" if family == "sd3" else "FluxPipeline",
        label=f"{label}, random weights (for speed measurement only: images are noise)",
        family=family,
        width=side,
        height=side,
        steps=4 if tiny else 10,
        local=True,
        note=NOISE,
        schedulers=("default",),  # FlowMatchEulerDiscreteScheduler: the discrete-time ones do not fit
        base=name if tiny else "",  # a tiny one's shapes are its own: no LoRA or distilled part fits it
        **kw,
    )


TINY = {"call_kwargs": {"max_sequence_length": 32}, "cost": TINY_COST}
TRANSFORMER_SPECS = (
    _transformer_spec("sd3", "sd3", "SD3-medium architecture", False, guidance=7.0, cost=SD3_COST),
    _transformer_spec("flux", "flux", "Flux.1-dev architecture", False, guidance=3.5, cost=FLUX_COST),
    _transformer_spec("sd3-tiny", "sd3", "Tiny SD3 transformer (64x64)", True, guidance=5.0, **TINY),
    _transformer_spec("flux-tiny", "flux", "Tiny Flux transformer (64x64)", True, guidance=3.5, **TINY),
)
