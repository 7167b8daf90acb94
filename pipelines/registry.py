"""One registry of pipeline specs, and resolution of user-given model names.

A model name is a registry id (`tiny-shapes`, `sd15`, ...), a local diffusers
directory, or a Hugging Face hub id (`owner/name`).
"""

from __future__ import annotations

import importlib
import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pipelines.errors import ValidationError

ROOT = Path(__file__).resolve().parent.parent
ASSETS = ROOT / "assets"
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]{0,95}/[\w.-]{1,96}$")
FAMILIES = {
    "StableDiffusionPipeline": "sd",
    "StableDiffusionXLPipeline": "sdxl",
}


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
SD15_COST = ModelCost(setup=10.0, step=0.08, pixels=512 * 512)
SDXL_COST = ModelCost(setup=20.0, step=0.25, pixels=1024 * 1024)
UNKNOWN_COST = ModelCost(setup=25.0, step=0.30, pixels=1024 * 1024)


@dataclass(frozen=True)
class PipelineSpec:
    """How to load a model and what it runs best with."""

    id: str
    source: str
    pipeline_class: str = "DiffusionPipeline"
    label: str = ""
    family: str = "sd"
    width: int = 512
    height: int = 512
    steps: int = 30
    guidance: float = 7.5
    scheduler: str = "default"
    dtypes: tuple[str, ...] = ("fp32", "fp16", "bf16")
    local: bool = False
    example_prompt: str = "a photo of an astronaut riding a horse on mars"
    note: str = ""
    load_kwargs: dict = field(default_factory=dict)
    cost: ModelCost = UNKNOWN_COST
    # Prompts that techniques quantizing activations calibrate on (the studio's own, never a dataset).
    calibration_prompts: tuple[str, ...] = CALIBRATION_PROMPTS
    # Model-specific behaviour, as "module:function" names resolved when used (so this file imports no model):
    # prompt_warning(prompt) -> a sentence about words the model ignores, or None;
    # prompt_fidelity(PIL image, prompt) -> {"score": ..., ...} how much of the prompt the image shows,
    # or None.
    prompt_warning: str | None = None
    prompt_fidelity: str | None = None

    def hook(self, name: str) -> Callable[..., Any] | None:
        """The spec's `name` hook as a function, or None when this model has none."""
        target = getattr(self, name)
        if target is None:
            return None
        module, _, function = target.partition(":")
        return getattr(importlib.import_module(module), function)


SPECS: dict[str, PipelineSpec] = {
    s.id: s
    for s in (
        PipelineSpec(
            id="tiny-shapes",
            source=str(ASSETS / "tiny-shapes"),
            pipeline_class="StableDiffusionPipeline",
            label="Tiny Shapes (bundled, offline, 64x64)",
            width=64,
            height=64,
            steps=20,
            guidance=6.0,
            local=True,
            example_prompt="a big red circle on the left, on a white background",
            calibration_prompts=(
                "a big red circle on the left, on a white background",
                "a small blue square at the top, on a black background",
                "a big yellow star in the centre, on a grey background",
                "a small green triangle on the right, on a white background",
            ),
            note="Trained in this repo on procedural shapes; runs anywhere in well under a second.",
            prompt_warning="pipelines.tiny_shapes.language:vocabulary_warning",
            prompt_fidelity="pipelines.tiny_shapes.analyze:fidelity",
            cost=ModelCost(setup=3.0, step=0.01, pixels=64 * 64, cpu_factor=1.5),
        ),
        PipelineSpec(
            id="sd15",
            source="stable-diffusion-v1-5/stable-diffusion-v1-5",
            pipeline_class="StableDiffusionPipeline",
            label="Stable Diffusion 1.5",
            steps=50,
            load_kwargs={"safety_checker": None, "requires_safety_checker": False},
            cost=SD15_COST,
        ),
        PipelineSpec(
            id="sdxl",
            source="stabilityai/stable-diffusion-xl-base-1.0",
            pipeline_class="StableDiffusionXLPipeline",
            label="Stable Diffusion XL base 1.0",
            family="sdxl",
            width=1024,
            height=1024,
            steps=30,
            guidance=5.0,
            example_prompt="a cute dog running on the grass",
            cost=SDXL_COST,
        ),
        PipelineSpec(
            id="sd-turbo",
            source="stabilityai/sd-turbo",
            pipeline_class="StableDiffusionPipeline",
            label="SD-Turbo (1-4 steps)",
            steps=1,
            guidance=0.0,
            load_kwargs={"safety_checker": None, "requires_safety_checker": False},
            cost=SD15_COST,
        ),
        PipelineSpec(
            id="sd15-arch",
            source="arch:sd15",
            pipeline_class="StableDiffusionPipeline",
            label="SD 1.5 architecture, random weights (for speed measurement only: images are noise)",
            width=256,
            height=256,
            steps=10,
            local=True,
            dtypes=("fp32", "fp16", "bf16"),
            note="For speed measurement only: images are noise.",
            cost=SD15_COST,
        ),
        PipelineSpec(
            id="sdxl-arch",
            source="arch:sdxl",
            pipeline_class="StableDiffusionXLPipeline",
            label="SDXL architecture, random weights (for speed measurement only: images are noise)",
            family="sdxl",
            width=512,
            height=512,
            steps=10,
            guidance=5.0,
            local=True,
            note="For speed measurement only: images are noise.",
            cost=SDXL_COST,
        ),
    )
}


def cost_of(model_id: str) -> ModelCost:
    """The assumed cost of a model: its spec's for a registry id; hub ids and local directories get the SDXL
    cost when their name says xl, a conservative default otherwise."""
    if model_id in SPECS:
        return SPECS[model_id].cost
    return SDXL_COST if "xl" in model_id.lower() else UNKNOWN_COST


def allowed_roots() -> list[Path]:
    """Directories local models may be loaded from (`STUDIO_MODEL_ROOTS`, else assets/ and the cwd)."""
    extra = os.environ.get("STUDIO_MODEL_ROOTS")
    roots = [Path(p) for p in extra.split(os.pathsep) if p] if extra else [Path.cwd()]
    return [ASSETS.resolve(), *(r.resolve() for r in roots)]


def _allowlist() -> set[str] | None:
    raw = os.environ.get("STUDIO_MODEL_ALLOWLIST")
    return {x.strip() for x in raw.split(",") if x.strip()} if raw else None


def _local_spec(path: Path) -> PipelineSpec:
    resolved = path.resolve()
    if not any(resolved.is_relative_to(root) for root in allowed_roots()):
        raise ValidationError(
            f"Local model directory {str(path)!r} is outside the allowed roots; "
            "add its parent to STUDIO_MODEL_ROOTS to allow it."
        )
    index = resolved / "model_index.json"
    if not index.is_file():
        raise ValidationError(f"{str(path)!r} is not a diffusers pipeline directory (no model_index.json).")
    try:
        cls = json.loads(index.read_text()).get("_class_name", "DiffusionPipeline")
    except (json.JSONDecodeError, AttributeError) as exc:
        raise ValidationError(f"{str(path)!r} has an unreadable model_index.json: {exc}") from None
    if not isinstance(cls, str) or not cls.isidentifier():
        raise ValidationError(
            f"{str(path)!r} asks for custom pipeline code ({cls!r}); the studio never runs code shipped "
            "with a model."
        )
    return PipelineSpec(
        id=str(resolved),
        source=str(resolved),
        pipeline_class=cls,
        label=resolved.name,
        family=FAMILIES.get(cls, "other"),
        local=True,
    )


def resolve(name: str) -> PipelineSpec:
    """Turn a model name from a request into a spec, or raise ValidationError saying why not."""
    name = (name or "").strip()
    if not name:
        raise ValidationError(
            "No model given; choose one of: " + ", ".join(SPECS) + ", a hub id or a local directory."
        )
    allow = _allowlist()
    if allow is not None and name not in allow:
        raise ValidationError(
            f"Model {name!r} is not in STUDIO_MODEL_ALLOWLIST ({', '.join(sorted(allow))})."
        )
    if name in SPECS:
        return SPECS[name]
    path = Path(name).expanduser()
    if name.startswith((".", "/", "~")) or path.is_dir():
        return _local_spec(path)
    if HUB_ID.match(name) and ".." not in name:
        return PipelineSpec(id=name, source=name, label=name, family="other")
    raise ValidationError(
        f"Unknown model {name!r}: use a registry id ({', '.join(SPECS)}), a hub id like 'owner/name', "
        "or a local diffusers directory."
    )


def with_family(spec: PipelineSpec, pipeline_class: str) -> PipelineSpec:
    """The spec updated once the real pipeline class is known (hub ids learn it at load time)."""
    return replace(spec, pipeline_class=pipeline_class, family=FAMILIES.get(pipeline_class, "other"))
