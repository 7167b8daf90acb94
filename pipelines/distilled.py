"""The step lever's parts, by the model they were made for: few-step adapters (a LoRA distilled to draw in
a handful of steps, with the scheduler, step count, guidance and LoRA scale it was trained for) and tiny
decoders (`AutoencoderTiny`, which decodes latents in a fraction of the full VAE's time).

Each is keyed by the base a LoRA file names (`pipelines.lora_files.BASES`: "tiny-shapes", "sd15", "sdxl",
"sd3", "flux"); the bundled model's own live in `assets/` and load offline, the others come from the hub (an
offline studio refuses them with the download to make). The licence is the one its publisher states.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipelines.sources import ASSETS


@dataclass(frozen=True)
class FewStepAdapter:
    """A distilled adapter and how it is run: `source` is a LoRA source (a name in the LoRA folders, or a hub
    `owner/name/file.safetensors`), `scheduler` a name in `pipelines.schedulers.SCHEDULERS`."""

    name: str
    label: str
    base: str
    source: str
    scheduler: str
    steps: int
    guidance: float
    lora_scale: float
    licence: str

    @property
    def hub(self) -> bool:
        return self.source.count("/") >= 2


FEW_STEP: tuple[FewStepAdapter, ...] = (
    # the bundled model's own, distilled from it (pipelines/tiny_shapes/train_few_step.py)
    FewStepAdapter(
        "lcm", "LCM-LoRA", "tiny-shapes", "tiny-shapes-lcm", "lcm_10", 4, 1.0, 0.25, "this repository's"
    ),
    FewStepAdapter(
        "lcm",
        "LCM-LoRA",
        "sd15",
        "latent-consistency/lcm-lora-sdv1-5/pytorch_lora_weights.safetensors",
        "lcm",
        4,
        1.0,
        1.0,
        "OpenRAIL++",
    ),
    FewStepAdapter(
        "lcm",
        "LCM-LoRA",
        "sdxl",
        "latent-consistency/lcm-lora-sdxl/pytorch_lora_weights.safetensors",
        "lcm",
        4,
        1.0,
        1.0,
        "OpenRAIL++",
    ),
    FewStepAdapter(
        "lightning",
        "SDXL-Lightning 4-step",
        "sdxl",
        "ByteDance/SDXL-Lightning/sdxl_lightning_4step_lora.safetensors",
        "euler_trailing",
        4,
        0.0,
        1.0,
        "OpenRAIL++",
    ),
    FewStepAdapter(
        "hyper",
        "Hyper-SD 8-step",
        "sd15",
        "ByteDance/Hyper-SD/Hyper-SD15-8steps-lora.safetensors",
        "ddim_trailing",
        8,
        0.0,
        1.0,
        "see the Hyper-SD model card",
    ),
    FewStepAdapter(
        "hyper",
        "Hyper-SDXL 8-step",
        "sdxl",
        "ByteDance/Hyper-SD/Hyper-SDXL-8steps-lora.safetensors",
        "ddim_trailing",
        8,
        0.0,
        1.0,
        "see the Hyper-SD model card",
    ),
    FewStepAdapter(
        "hyper",
        "Hyper-SD3 8-step (CFG-preserving)",
        "sd3",
        "ByteDance/Hyper-SD/Hyper-SD3-8steps-CFG-lora.safetensors",
        "default",
        8,
        5.0,
        0.125,
        "see the Hyper-SD model card; SD3's own licence applies",
    ),
    FewStepAdapter(
        "hyper",
        "Hyper-FLUX.1-dev 8-step",
        "flux",
        "ByteDance/Hyper-SD/Hyper-FLUX.1-dev-8steps-lora.safetensors",
        "default",
        8,
        3.5,
        0.125,
        "FLUX.1-dev non-commercial licence",
    ),
    FewStepAdapter(
        "tcd",
        "TCD",
        "sd15",
        "h1t/TCD-SD15-LoRA/pytorch_lora_weights.safetensors",
        "tcd",
        4,
        0.0,
        1.0,
        "see the TCD model card",
    ),
    FewStepAdapter(
        "tcd",
        "TCD",
        "sdxl",
        "h1t/TCD-SDXL-LoRA/pytorch_lora_weights.safetensors",
        "tcd",
        4,
        0.0,
        1.0,
        "see the TCD model card",
    ),
    FewStepAdapter(
        "turbo",
        "FLUX.1-Turbo-Alpha",
        "flux",
        "alimama-creative/FLUX.1-Turbo-Alpha/diffusion_pytorch_model.safetensors",
        "default",
        8,
        3.5,
        1.0,
        "FLUX.1-dev non-commercial licence",
    ),
)
ADAPTER_NAMES = tuple(dict.fromkeys(a.name for a in FEW_STEP))

# base -> the AutoencoderTiny for its latents: the bundled model's folder, or a hub id
TINY_VAES: dict[str, str] = {
    "tiny-shapes": str(ASSETS / "tiny-shapes-tiny-vae"),
    "sd15": "madebyollin/taesd",
    "sd2": "madebyollin/taesd",
    "sdxl": "madebyollin/taesdxl",
    "sd3": "madebyollin/taesd3",
    "flux": "madebyollin/taef1",
}


def few_step_adapter(base: str, name: str | None = None) -> FewStepAdapter | None:
    """The few-step adapter named `name` (None: the first registered) for models of `base`, or None."""
    for adapter in FEW_STEP:
        if adapter.base == base and name in (None, adapter.name):
            return adapter
    return None


def adapters_for(base: str) -> list[str]:
    """The adapter names registered for `base`, in order."""
    return [a.name for a in FEW_STEP if a.base == base]
