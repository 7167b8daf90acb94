"""Will it fit: the peak memory a request should reach, before it runs.

The estimate is what the run's peak-memory figure measures (`studio.measure.memory_probe`): on a CPU the
process's resident set, on a GPU the CUDA allocator. It adds up
- what is there now: the process's RSS (CPU) or the memory allocated on the GPU;
- the weights, by component (`pipelines.shapes`: parameter counts from the configs, or the loaded pipeline),
  at the request's precision, placed as its techniques place them (offload keeps the largest component or
  one layer on the GPU; a device map splits them), plus the copies some techniques keep; nothing on a CPU
  when the pipeline is already loaded (its weights are in the RSS);
- activations: the larger of the UNet's (first-level width x latent pixels x UNet batch, twice the batch
  with classifier-free guidance) and the VAE decoder's (first-level width x output pixels x images; one
  image with VAE slicing, one tile with VAE tiling), each times a number of live tensors measured on the
  SD 1.5 architecture on a CPU (docs/benchmarks.md);
- what each technique changes is its own declaration (`Optimization.memory_effect`), as are the memory
  techniques offered when a run would not fit (`remedy`);
- and, once the run log has runs of this model on this kind of device, the median ratio of their measured
  peak to their estimate (clamped to 0.5-2), so the estimate learns from what was measured.

`check_fits` refuses a request predicted not to fit, with the estimate and the memory techniques that would
bring it under: on a GPU of known size against its memory, on a CPU against the memory this process may
reach (what it holds now plus what the machine, or its container's limit, has available).
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import psutil
import torch

from pipelines.shapes import Shape, shape_of, spec_shape
from studio import devices
from studio.errors import ValidationError
from studio.measure.memory_probe import rss
from studio.optimizations import REGISTRY, check_conflicts, get, unavailable_reason
from studio.optimizations.facts import MemoryEffect
from studio.request import GenerationRequest
from studio.runlog import RunLog

UNET_TENSORS = 40  # live UNet activations at the first level's width (CPU, SD 1.5 architecture)
VAE_TENSORS = 10.5  # live VAE-decoder activations at full resolution and the first level's width
TILE_PIXELS = 512 * 512  # diffusers' VAE tile at SD sizes
HEADROOM = (
    0.95  # the share of a GPU's memory, or of the RAM a process may reach, a run may be predicted to use
)
HISTORY = 200
# the techniques offered, alone or in pairs, when a run would not fit (each declares it: `remedy`)
MEMORY_TECHNIQUES = tuple(name for name, opt in REGISTRY.items() if opt.memory_effect.remedy)


@dataclass(frozen=True)
class Estimate:
    """The predicted peak and its parts, in bytes."""

    kind: str  # cpu_rss or cuda_allocated, as the run's peak memory figure
    now: int  # what the process (CPU) or the GPU holds already
    weights: int  # weights this request adds where it runs
    activations: int
    correction: float  # measured/estimated peak of this model's logged runs (1.0 without history)
    peak: int
    known: bool  # False when the model's size is unknown until it is loaded (a hub id not loaded yet)
    capacity: int | None  # the GPU's memory, when known

    @property
    def fits(self) -> bool | None:
        return None if self.capacity is None else self.peak <= HEADROOM * self.capacity

    def as_json(self) -> dict[str, Any]:
        mb = {k: round(v / 2**20) for k, v in asdict(self).items() if isinstance(v, int) and k != "known"}
        return {
            **mb,
            "kind": self.kind,
            "correction": round(self.correction, 3),
            "known": self.known,
            "fits": self.fits,
            "sentence": sentence(self),
        }


def _gb(n: int) -> str:
    return f"{n / 2**30:.1f} GB" if n >= 2**30 else f"{n / 2**20:.0f} MB"


def sentence(e: Estimate) -> str:
    """The estimate in one sentence a person reads at a glance."""
    if not e.known:
        return "The model's size is unknown until it is loaded (a hub model not loaded yet)."
    parts = f"{_gb(e.now)} in use now + {_gb(e.weights)} weights + {_gb(e.activations)} activations"
    where = "this GPU" if e.kind == "cuda_allocated" else "this process"
    text = f"Estimated peak {_gb(e.peak)} for {where} ({parts}"
    text += f", x{e.correction:.2f} from this model's logged runs)." if e.correction != 1.0 else ")."
    if e.capacity is not None:
        room = "" if e.kind == "cuda_allocated" else " of RAM (in use by this process now, plus available)"
        text += f" {'Fits' if e.fits else 'Does not fit'} in {_gb(e.capacity)}{room}."
    return text


def _cgroup_limit() -> int | None:
    """The container's memory limit (cgroup v2, then v1), None where there is none."""
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = Path(path).read_text().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < 2**60:
            return int(text)
    return None


def cpu_capacity(now: int) -> int:
    """The most a CPU run's process may reach: what it holds now plus what is available, within the
    container's limit."""
    reachable = now + psutil.virtual_memory().available
    limit = _cgroup_limit()
    return min(reachable, limit) if limit else reachable


def _shape(manager: Any, request: GenerationRequest) -> tuple[Shape | None, bool]:
    """The model's shape, and whether it is loaded (its weights already in this process)."""
    entry = manager.loaded_pipeline(request)
    if entry is not None:
        return shape_of(entry), True
    return spec_shape(request.spec), False


def _bytes_per_param(request: GenerationRequest) -> int:
    dtype = next((get(o).dtype for o in request.optimizations if get(o).dtype is not None), torch.float32)
    return torch.empty((), dtype=dtype).element_size()


def _effects(request: GenerationRequest) -> list[MemoryEffect]:
    return [get(o).memory_effect for o in request.optimizations]


def _on_device(request: GenerationRequest, params: dict[str, int], size: int) -> int:
    """Weights where the run's peak is measured, as its techniques place them (`MemoryEffect.gpu_weights`)."""
    total = sum(params.values()) * size
    largest = max(params.values(), default=0) * size
    if not request.device.startswith("cuda"):
        return total
    placed = {effect.gpu_weights for effect in _effects(request)}
    if "one_layer" in placed:
        return largest // 20  # one layer at a time; the largest layer is a few % of the largest model
    if "largest_model" in placed:
        return largest
    if "split_over_gpus" in placed:
        return total // max(1, len(devices.detect().gpus))
    return total


def _activations(request: GenerationRequest, shape: Shape, size: int) -> int:
    latent = (request.width // shape.latent_factor) * (request.height // shape.latent_factor)
    unet_batch = request.batch * (2 if request.guidance > 1 else 1)
    unet = UNET_TENSORS * unet_batch * latent * shape.unet_channels * size
    decodes = {effect.decodes for effect in _effects(request)}  # `MemoryEffect.decodes`
    images = 1 if "one_image" in decodes else request.batch
    pixels = request.width * request.height
    if "one_tile" in decodes:
        pixels = min(pixels, TILE_PIXELS)
    vae = int(VAE_TENSORS * images * pixels * shape.vae_channels * size)
    return max(unet, vae)


def _correction(runlog: RunLog | None, request: GenerationRequest, kind: str) -> float:
    """The median measured/estimated peak of this model's logged runs on this kind of device."""
    if runlog is None:
        return 1.0
    ratios = []
    for row in runlog.runs(model=request.model, status="ok", limit=HISTORY):
        estimate = ((row.get("stats") or {}).get("memory_estimate") or {}).get("peak")
        if estimate and row.get("peak_memory") and row.get("memory_kind") == kind:
            ratios.append(row["peak_memory"] / (estimate * 2**20))
    return min(2.0, max(0.5, statistics.median(ratios))) if ratios else 1.0


def estimate(manager: Any, request: GenerationRequest, runlog: RunLog | None = None) -> Estimate:
    """The peak memory `request` should reach if it ran now (see the module's docstring)."""
    cuda = request.device.startswith("cuda")
    kind = "cuda_allocated" if cuda else "cpu_rss"
    index = int(request.device.partition(":")[2] or 0) if cuda else 0
    gpus = devices.detect().gpus if cuda else ()
    capacity = next((g.total_memory for g in gpus if g.index == index), None)
    if cuda:  # nothing allocated before CUDA's first use
        now = torch.cuda.memory_allocated(index) if torch.cuda.is_initialized() else 0
    else:
        now = rss()
        capacity = cpu_capacity(now) if request.device == "cpu" else None
    shape, loaded = _shape(manager, request)
    if shape is None:
        return Estimate(
            kind=kind,
            now=now,
            weights=0,
            activations=0,
            correction=1.0,
            peak=now,
            known=False,
            capacity=capacity,
        )
    size = _bytes_per_param(request)
    weights = 0 if loaded and not cuda else _on_device(request, shape.params, size)
    copies = sum(get(o).copies(request.settings.get(o, {})) for o in request.optimizations)
    copies *= sum(shape.params.values()) * size
    activations = _activations(request, shape, size)
    correction = _correction(runlog, request, kind)
    peak = int(now + (weights + copies + activations) * correction)
    return Estimate(
        kind=kind,
        now=now,
        weights=int(weights + copies),
        activations=activations,
        correction=correction,
        peak=peak,
        known=True,
        capacity=capacity,
    )


def check_fits(manager: Any, request: GenerationRequest, runlog: RunLog | None = None) -> Estimate:
    """The estimate; a ValidationError when it does not fit (a GPU of known size, or the CPU's RAM), naming
    the memory techniques that would bring it under (alone, then in pairs)."""
    found = estimate(manager, request, runlog)
    if found.fits is not False:
        return found
    raise ValidationError(sentence(found) + remedy(manager, request, runlog))


def answer(manager: Any, request: GenerationRequest, runlog: RunLog | None = None) -> dict[str, Any]:
    """The estimate as every face answers "will it fit?" (`Estimate.as_json`): where it does not fit, its
    sentence goes on with what would bring it under, the very words a run of it would be refused with. One
    estimate decides both (the RAM available moves between two)."""
    found = estimate(manager, request, runlog)
    said = found.as_json()
    if found.fits is False:
        said["sentence"] += remedy(manager, request, runlog)
    return said


def remedy(manager: Any, request: GenerationRequest, runlog: RunLog | None = None) -> str:
    """For a request that does not fit: the memory techniques that would bring it under (alone, then in
    pairs), else a smaller size or batch; a sentence that follows the estimate's."""
    hw = devices.detect()
    usable = [
        name
        for name in MEMORY_TECHNIQUES
        if name not in request.optimizations
        and unavailable_reason(REGISTRY[name], hw, request.device, request.spec.family) is None
    ]
    options = [(n,) for n in usable] + [(a, b) for i, a in enumerate(usable) for b in usable[i + 1 :]]
    fixes: list[tuple[str, ...]] = []
    for extra in options:
        if any(set(fix) <= set(extra) for fix in fixes):
            continue  # a pair is offered only where neither of its techniques does it alone
        try:
            check_conflicts({*request.optimizations, *extra})
        except ValidationError:
            continue
        if estimate(manager, replace(request, optimizations=(*request.optimizations, *extra)), runlog).fits:
            fixes.append(extra)
    if fixes:
        return f" It would fit with {fix_words(fixes[:4])}."
    return " No memory technique alone or in pairs brings it under; use a smaller size or batch."


def fix_words(fixes: list[tuple[str, ...]]) -> str:
    """The fixes in words that say whether one or all are needed: 'vae_slicing ticked', 'any one of:
    vae_slicing; vae_tiling', a pair 'attention_slicing and vae_tiling together'."""
    said = [fix[0] if len(fix) == 1 else f"{' and '.join(fix)} together" for fix in fixes]
    if len(said) == 1:
        return f"{said[0]} ticked" if len(fixes[0]) == 1 else said[0]
    return f"any one of: {'; '.join(said)}"
