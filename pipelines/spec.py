"""A pipeline spec: how to load a model, what it runs best with and its assumed compute cost (the registry of
specs is `pipelines.registry`)."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ModelCost:
    """Assumed compute cost of a model on one GPU (not measured here: no GPU on the development machines),
    used to ask ZeroGPU for a duration and to bound a request's work.

    setup: seconds to move the weights to the GPU and make the first call (kernels, allocator).
    step: seconds per denoising step at `pixels` output pixels, batch 1, classifier-free guidance on.
    cpu_factor: how much longer a step takes on a 2-core CPU (sd15-arch: ~4 s against ~0.1 s; the bundled
    model's step is about the same on either).
    """

    setup: float
    step: float
    pixels: int
    cpu_factor: float = 20.0


CALIBRATION_PROMPTS = (
    "a photo of an astronaut riding a horse on mars",
    "a watercolor painting of a lighthouse on a cliff at sunset",
    "a close-up portrait of an old man with a grey beard, studio lighting",
    "a bowl of fruit on a wooden table, still life",
)
NOISE = "For speed measurement only: images are noise."
UNKNOWN_COST = ModelCost(setup=25.0, step=0.30, pixels=1024 * 1024)


@dataclass(frozen=True)
class PipelineSpec:
    """How to load a model and what it runs best with."""

    id: str
    source: str
    pipeline_class: str = "DiffusionPipeline"
    label: str = ""
    family: str = "sd"
    base: str = ""  # what LoRAs and distilled parts name as trained on (`adapter_base`); "": the family's
    width: int = 512
    height: int = 512
    steps: int = 30
    guidance: float = 7.5
    scheduler: str = "default"
    schedulers: tuple[str, ...] = ()  # the schedulers it runs with (none listed: any in pipelines.schedulers)
    dtypes: tuple[str, ...] = ("fp32", "fp16", "bf16")
    local: bool = False
    example_prompt: str = "a photo of an astronaut riding a horse on mars"
    note: str = ""
    load_kwargs: dict = field(default_factory=dict)
    call_kwargs: dict = field(default_factory=dict)  # further pipeline call arguments (T5's sequence length)
    cost: ModelCost = UNKNOWN_COST
    # Prompts that techniques quantizing activations calibrate on (the studio's own, never a dataset).
    calibration_prompts: tuple[str, ...] = CALIBRATION_PROMPTS
    # Model-specific behaviour, as "module:function" names resolved when used (so this file imports no model):
    # prompt_warning(prompt) -> a sentence about words the model ignores, or None;
    # prompt_fidelity(PIL image, prompt) -> {"score": ..., ...} how much of the prompt the image shows,
    # or None.
    prompt_warning: str | None = None
    prompt_fidelity: str | None = None
    # A single-file checkpoint (`source` is the .safetensors file) and the local diffusers folder its
    # component configs come from (None: diffusers infers the model type and fetches them from the hub).
    single_file: bool = False
    single_file_config: str | None = None

    @property
    def adapter_base(self) -> str:
        """The base a LoRA made for this model names ("tiny-shapes", "sd15", "sd2", "sdxl", "sd3", "flux")."""
        return self.base or {"sd": "sd15"}.get(self.family, self.family)

    def hook(self, name: str) -> Callable[..., Any] | None:
        """The spec's `name` hook as a function, or None when this model has none."""
        target = getattr(self, name)
        if target is None:
            return None
        module, _, function = target.partition(":")
        return getattr(importlib.import_module(module), function)
