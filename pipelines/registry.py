"""One registry of pipeline specs, and resolution of user-given model names.

A model name is a registry id (`tiny-shapes`, `sd15`, ...), a local diffusers
directory, a local single-file `.safetensors` checkpoint (original SD 1.x/2.x or
SDXL layout), or a Hugging Face hub id (`owner/name`). What may be loaded from
where is checked in `pipelines.sources`.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from pipelines.errors import ValidationError
from pipelines.sources import (
    ASSETS,
    HUB_ID,
    SDXL_KEY,
    UNET,
    check_allowed,
    pipeline_folder,
    refuse_pickle,
    safetensors_file,
    same_architecture,
)
from pipelines.sources import ROOT as ROOT
from pipelines.sources import allowed_roots as allowed_roots
from pipelines.spec import CALIBRATION_PROMPTS as CALIBRATION_PROMPTS
from pipelines.spec import NOISE, UNKNOWN_COST, ModelCost, PipelineSpec
from pipelines.transformer_specs import TRANSFORMER_SPECS

FAMILIES = {
    "StableDiffusionPipeline": "sd",
    "StableDiffusionXLPipeline": "sdxl",
    "StableDiffusion3Pipeline": "sd3",
    "FluxPipeline": "flux",
}


SD15_COST = ModelCost(setup=10.0, step=0.08, pixels=512 * 512)
SDXL_COST = ModelCost(setup=20.0, step=0.25, pixels=1024 * 1024)


SPECS: dict[str, PipelineSpec] = {
    s.id: s
    for s in (
        PipelineSpec(
            id="tiny-shapes",
            source=str(ASSETS / "tiny-shapes"),
            pipeline_class="StableDiffusionPipeline",
            label="Tiny Shapes (bundled, offline, 64x64)",
            base="tiny-shapes",
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
            base="sd2",
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
            note=NOISE,
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
            note=NOISE,
            cost=SDXL_COST,
        ),
        *TRANSFORMER_SPECS,
    )
}


def cost_of(model_id: str | PipelineSpec) -> ModelCost:
    """The assumed cost of a model: its spec's for a registry id or a single-file checkpoint (its
    template's); hub ids and local directories get the SDXL cost when their name says xl, a conservative
    default otherwise."""
    if isinstance(model_id, PipelineSpec):
        if model_id.single_file:
            return model_id.cost
        model_id = model_id.id
    if model_id in SPECS:
        return SPECS[model_id].cost
    return SDXL_COST if "xl" in model_id.lower() else UNKNOWN_COST


def _local_spec(path: Path) -> PipelineSpec:
    resolved, cls = pipeline_folder(path, "Local model directory")
    return PipelineSpec(
        id=str(resolved),
        source=str(resolved),
        pipeline_class=cls,
        label=resolved.name,
        family=FAMILIES.get(cls, "other"),
        local=True,
    )


def _single_file_spec(path: Path, config: Any) -> PipelineSpec:
    """A spec for a local single-file checkpoint: the bundled model's own defaults and hooks when the file is
    the bundled architecture, else SD 1.5's or SDXL's (from the checkpoint's keys or the config folder)."""
    resolved, header = safetensors_file(path, "Local model file")
    if not any(key.startswith(UNET) for key in header):
        raise ValidationError(
            f"{str(path)!r} holds no UNet (no model.diffusion_model.* weights): a single-file model is a "
            "Stable Diffusion 1.x/2.x or SDXL checkpoint; a VAE file goes in vae."
        )
    if config:
        if not isinstance(config, str):
            raise ValidationError(f"single_file_config must be a folder path, not {config!r}.")
        check_allowed(config, "single_file_config")
        folder, cls = pipeline_folder(Path(config), "single_file_config")
        config = str(folder)
        bundled = next((s for s in SPECS.values() if s.local and s.source == config), None)
    else:  # the folder of the registry model whose architecture the file has, if any; else diffusers' default
        bundled = next((s for s in SPECS.values() if s.local and same_architecture(header, s.source)), None)
        config = bundled.source if bundled else None
        inferred = "StableDiffusionXLPipeline" if SDXL_KEY in header else "StableDiffusionPipeline"
        cls = bundled.pipeline_class if bundled else inferred
    template = bundled or SPECS["sdxl" if FAMILIES.get(cls) == "sdxl" else "sd15"]
    return replace(
        template,
        id=str(resolved),
        source=str(resolved),
        pipeline_class=cls,
        label=resolved.name,
        family=FAMILIES.get(cls, "other"),
        local=True,
        single_file=True,
        single_file_config=config,
        note=f"Single-file checkpoint; configs from {config or 'the hub (diffusers infers the model)'}.",
    )


def resolve(name: str, single_file_config: str | None = None) -> PipelineSpec:
    """Turn a model name from a request into a spec, or raise ValidationError saying why not.

    Args:
        name: a registry id, a local diffusers folder, a local .safetensors checkpoint or a hub id.
        single_file_config: for a .safetensors checkpoint, a local diffusers folder of the same architecture
            whose configs (and tokenizer, scheduler) it loads with; by default the bundled model's folder when
            the file is the bundled architecture, else diffusers fetches the configs from the hub.
    """
    name = (name or "").strip()
    if not name:
        raise ValidationError(
            "No model given; choose one of: " + ", ".join(SPECS) + ", a hub id, a local directory or a "
            ".safetensors file."
        )
    refuse_pickle(name)
    check_allowed(name, space_default=tuple(SPECS))
    path = Path(name).expanduser()
    if name in SPECS:
        spec = SPECS[name]
    elif path.suffix == ".safetensors" or path.is_file():
        return _single_file_spec(path, single_file_config)
    elif name.startswith((".", "/", "~")) or path.is_dir():
        spec = _local_spec(path)
    elif HUB_ID.match(name) and ".." not in name:
        spec = PipelineSpec(id=name, source=name, label=name, family="other")
    else:
        raise ValidationError(
            f"Unknown model {name!r}: use a registry id ({', '.join(SPECS)}), a hub id like 'owner/name', "
            "a local diffusers directory or a local .safetensors checkpoint."
        )
    if single_file_config:
        raise ValidationError(
            f"single_file_config is for a single-file .safetensors model; {name!r} brings its own configs."
        )
    return spec
