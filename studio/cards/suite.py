"""The cards' suite: which models it measures on a device, at which shape, and what it tries on each.

The suite is fixed and versioned: a card records `SUITE_VERSION`, and figures compare across machines only
between cards of the same suite version. Change anything below (a shape, a step count, a candidate, a
threshold) and raise `SUITE_VERSION`.

- tiny-shapes (the bundled model, 64x64, 20 steps) on every device;
- sd15-arch: 512x512 and 50 steps on a GPU, 256x256 and 10 steps on a CPU;
- sdxl-arch 1024x1024, 30 steps: on GPUs with at least `SDXL_MIN_GB` of memory;
- flux-arch 1024x1024, 20 steps: on GPUs with at least `FLUX_MIN_GB` (its fp32 baseline and a bf16 copy).

Keeping the math: on a CPU, fp32 arithmetic at least `KEEP_DB["cpu"]` dB from the baseline's image; on a GPU,
the same precision as the reference row (fp16, bf16 for Flux) at least `KEEP_DB["gpu"]` dB from its image
(compiled and fused configurations read 66-73 dB from it, DeepCache 48 dB). The lossy search is the
auto-tuner on a CPU; on a GPU a fixed list, because the auto-tuner's candidates are measured against fp32,
and random weights in half precision end in another noise image (13.6 dB).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

SUITE_VERSION = 1
KEEP_DB = {"cpu": 100.0, "gpu": 60.0}
SDXL_MIN_GB = 40.0
FLUX_MIN_GB = 120.0
COMPILED_CPU = "channels_last+torch_compile[dynamic=false,freezing=true]"
CUDA_GRAPHS = "torch_compile[mode=reduce-overhead]"
TINY_PROMPT = "a big red circle on the left, on a white background"


@dataclass(frozen=True)
class Case:
    """One model of the suite on one kind of device."""

    model: str
    width: int
    height: int
    steps: int
    prompt: str
    guidance: float | None = None  # None: the model's own
    seed: int = 1
    keep: tuple[str, ...] = ()  # configurations expected to keep the math (measured, not assumed)
    lossy_search: tuple[str, ...] = ()  # the auto-tuner's techniques, most promising first
    lossy_configs: tuple[str, ...] = ()  # a fixed list instead of the auto-tuner
    reference: str | None = None  # GPU: the precision the kept math is held to ("fp16")
    keep_db: float = KEEP_DB["cpu"]

    @property
    def shape(self) -> str:
        """'sd15-arch 256x256, 10 steps'."""
        return f"{self.model} {self.width}x{self.height}, {self.steps} steps"

    def fields_on(self, device: str) -> dict[str, Any]:
        """This case's request on `device`, as `studio.request.build_request`'s fields."""
        return {
            "model": self.model,
            "prompt": self.prompt,
            "seed": self.seed,
            "steps": self.steps,
            "guidance": self.guidance,
            "width": self.width,
            "height": self.height,
            "device": device,
        }


CPU_CASES = (
    Case(
        model="tiny-shapes",
        width=64,
        height=64,
        steps=20,
        prompt=TINY_PROMPT,
        keep=("openvino", COMPILED_CPU),
        lossy_search=("openvino", "deepcache", "cfg_cutoff", "token_merging"),
    ),
    Case(
        model="sd15-arch",
        width=256,
        height=256,
        steps=10,
        prompt="a photo",
        guidance=7.5,
        keep=("openvino", "openvino[winograd=true]"),
        lossy_search=("openvino", "deepcache", "cfg_cutoff"),
    ),
)

_GPU_SD = dict(reference="fp16", keep_db=KEEP_DB["gpu"])
_SD_LOSSY = ("fp16+deepcache", "fp16+cfg_cutoff", "fp16+deepcache+cfg_cutoff")
GPU_CASES = (
    Case(
        model="tiny-shapes",
        width=64,
        height=64,
        steps=20,
        prompt=TINY_PROMPT,
        keep=(f"fp16+sdpa+{CUDA_GRAPHS}", "fp16+sdpa+fused_qkv"),
        lossy_configs=_SD_LOSSY,
        **_GPU_SD,
    ),
    Case(
        model="sd15-arch",
        width=512,
        height=512,
        steps=50,
        prompt="a photo",
        guidance=7.5,
        keep=(f"fp16+channels_last+sdpa+cudnn_benchmark+tf32+{CUDA_GRAPHS}", f"fp16+sdpa+{CUDA_GRAPHS}"),
        lossy_configs=_SD_LOSSY,
        **_GPU_SD,
    ),
    Case(
        model="sdxl-arch",
        width=1024,
        height=1024,
        steps=30,
        prompt="a photo",
        guidance=5.0,
        keep=(f"fp16+channels_last+cudnn_benchmark+{CUDA_GRAPHS}", f"fp16+sdpa+{CUDA_GRAPHS}"),
        lossy_configs=_SD_LOSSY,
        **_GPU_SD,
    ),
    Case(
        model="flux-arch",
        width=1024,
        height=1024,
        steps=20,
        prompt="a photo",
        guidance=3.5,
        keep=(f"bf16+{CUDA_GRAPHS}", "bf16+fused_qkv"),
        lossy_configs=("bf16+first_block_cache", "bf16+taylorseer_cache"),
        reference="bf16",
        keep_db=KEEP_DB["gpu"],
    ),
)
MIN_GB = {"sdxl-arch": SDXL_MIN_GB, "flux-arch": FLUX_MIN_GB}


def gpu_memory_gb(hardware: Any, device: str) -> float | None:
    """The total memory of the GPU `device` names ('cuda:1'), None off CUDA."""
    if not device.startswith("cuda"):
        return None
    index = int(device.partition(":")[2] or 0)
    return next((g.total_memory / 2**30 for g in hardware.gpus if g.index == index), None)


def suite_for(hardware: Any, device: str) -> list[Case]:
    """The suite's cases for `device` ('cpu', 'cuda:0', ...) of the machine `hardware` describes
    (`studio.devices.Hardware`): a CPU's, or a GPU's with the models its memory holds."""
    memory = gpu_memory_gb(hardware, device)
    if memory is None:
        return list(CPU_CASES)
    return [c for c in GPU_CASES if memory >= MIN_GB.get(c.model, 0.0)]


def pick_cases(cases: list[Case], models: list[str] | None) -> list[Case]:
    """The cases of `models` (all of them for None), in the suite's order; a model outside the suite is
    refused with the suite's models named."""
    from studio.errors import ValidationError

    known = [c.model for c in cases]
    unknown = [m for m in models or () if m not in known]
    if unknown:
        raise ValidationError(
            f"{', '.join(unknown)} is not in this device's suite of cards (version {SUITE_VERSION}); "
            f"choose from {', '.join(known)}."
        )
    return [c for c in cases if models is None or c.model in models]


def shortened(case: Case, steps: int) -> Case:
    """`case` at fewer steps (for tests: a card from a shortened case says so in its `steps`)."""
    return replace(case, steps=steps)
