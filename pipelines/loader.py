"""Load a pipeline from a spec with the real diffusers loader, safetensors only, no remote code."""

from __future__ import annotations

import inspect
import logging
import tempfile
from pathlib import Path
from typing import Any

import diffusers
import torch
from safetensors import SafetensorError

from pipelines.errors import ModelLoadError, ValidationError
from pipelines.registry import PipelineSpec
from pipelines.schedulers import SCHEDULERS

log = logging.getLogger(__name__)


def make_scheduler(name: str, base: Any) -> Any:
    """A fresh scheduler instance for one request, built from the pipeline's own config.

    Schedulers keep per-call state (step index, model outputs), so requests never share one.
    """
    try:
        cls, overrides = SCHEDULERS[name]
    except KeyError:
        raise ValidationError(f"Unknown scheduler {name!r}; choose one of {', '.join(SCHEDULERS)}.") from None
    kind = getattr(diffusers, cls) if cls else type(base)
    known = inspect.signature(kind.__init__).parameters  # another kind's options would each be warned about
    config = {k: v for k, v in base.config.items() if k in known or k.startswith("_")}
    return kind.from_config(config, **overrides)


def pipeline_class(spec: PipelineSpec) -> type:
    cls = getattr(diffusers, spec.pipeline_class, None)
    if cls is None or not issubclass(cls, diffusers.DiffusionPipeline):
        raise ModelLoadError(
            f"{spec.pipeline_class!r} is not a diffusers pipeline class this studio can load."
        )
    return cls


LOAD_ERRORS = (OSError, ValueError, RuntimeError, KeyError, SafetensorError)


def load(
    spec: PipelineSpec,
    dtype: torch.dtype = torch.float32,
    device_map: str | None = None,
    max_memory: dict | None = None,
    vae: str | None = None,
) -> Any:
    """Read a pipeline from disk or the hub, on the CPU unless a device map says otherwise.

    Args:
        spec: what to load.
        dtype: weights dtype.
        device_map: None or "balanced" (accelerate places the models over GPUs).
        max_memory: per-device caps for the device map, e.g. {0: "4GB", "cpu": "16GB"}.
        vae: a VAE to swap in (as `pipelines.sources.resolve_vae` returns it), or None for the model's own.

    Raises:
        ModelLoadError: missing, corrupt, not safetensors, or not a loadable pipeline.
    """
    if spec.source.startswith("arch:"):
        from pipelines.architectures import build
        from pipelines.registry import SPECS
        from pipelines.shapes import check_memory

        if device_map:
            raise ModelLoadError(
                f"{spec.id!r} is built from its configuration in this process, which places it without a "
                "device map; save it as a diffusers folder (pipe.save_pretrained) to spread it over GPUs."
            )
        check_memory(spec, dtype)  # before anything is built
        pipe = build(spec.source.removeprefix("arch:"), SPECS["tiny-shapes"].source, dtype)
    elif spec.single_file:
        pipe = _load_single_file(spec, dtype, device_map)
    else:
        kwargs: dict[str, Any] = dict(spec.load_kwargs, dtype=dtype, use_safetensors=True)
        if device_map:
            kwargs.update(device_map=device_map, max_memory=max_memory)
        cls = pipeline_class(spec)
        try:
            pipe = cls.from_pretrained(spec.source, **kwargs)
        except LOAD_ERRORS as exc:
            raise ModelLoadError(
                f"Could not load {spec.id!r} from {spec.source!r}: {exc}. Check the name, your network or "
                "HF_TOKEN for gated models, and that the weights are in safetensors format."
            ) from exc
    if vae:
        swap_vae(pipe, vae)
    pipe.set_progress_bar_config(disable=True)
    log.info(
        "loaded %s (%s) as %s%s", spec.id, dtype, type(pipe).__name__, f" with the VAE {vae}" if vae else ""
    )
    return pipe


def _load_single_file(spec: PipelineSpec, dtype: torch.dtype, device_map: str | None) -> Any:
    """A pipeline from one original-format .safetensors checkpoint, its configs from `spec.single_file_config`
    (or, without one, diffusers' default: the configs of the model type it infers, from the hub)."""
    from diffusers.loaders.single_file_utils import SingleFileComponentError  # imports torchao: not at start

    cls = pipeline_class(spec)
    if not issubclass(cls, diffusers.loaders.FromSingleFileMixin):
        raise ModelLoadError(f"{spec.pipeline_class} cannot load a single-file checkpoint.")
    if device_map:
        raise ModelLoadError(
            f"{spec.id!r} is a single-file checkpoint, which loads without a device map; save it as a "
            "diffusers folder (pipe.save_pretrained) to spread it over GPUs."
        )
    config = spec.single_file_config
    kwargs: dict[str, Any] = dict(spec.load_kwargs, dtype=dtype, config=config)
    try:
        return cls.from_single_file(spec.source, local_files_only=config is not None, **kwargs)
    except OSError as exc:
        if config is not None:
            raise ModelLoadError(
                f"Could not load {spec.id!r} with the configs of {config!r}: {exc}."
            ) from exc
        raise ModelLoadError(
            f"Could not find the component configs for the single-file checkpoint {spec.id!r} ({exc}): "
            "diffusers fetches them from the Hugging Face Hub, which is offline or unreachable here. Pass "
            "single_file_config, a local diffusers folder of the same architecture (e.g. the base model's "
            "repository, downloaded once)."
        ) from exc
    except (*LOAD_ERRORS, SingleFileComponentError) as exc:
        raise ModelLoadError(
            f"Could not load the single-file checkpoint {spec.id!r}: {exc}. Check that it is a Stable "
            "Diffusion 1.x/2.x or SDXL checkpoint and that single_file_config, if given, is a folder of its "
            "architecture."
        ) from exc


def swap_vae(pipe: Any, source: str) -> None:
    """Replace `pipe.vae` by the AutoencoderKL at `source` (a local folder or pipeline folder, a .safetensors
    file in the original or diffusers layout, or a hub id), in the pipeline VAE's dtype and device.

    A single file is read with the pipeline VAE's own config: a VAE swapped in must share its architecture.
    """
    own = pipe.vae
    path = Path(source)
    try:
        if path.is_file():
            with tempfile.TemporaryDirectory() as config:
                own.save_config(config)
                new = diffusers.AutoencoderKL.from_single_file(source, config=config, local_files_only=True)
        else:
            sub = "vae" if path.is_dir() and not (path / "config.json").is_file() else None
            new = diffusers.AutoencoderKL.from_pretrained(source, subfolder=sub, use_safetensors=True)
    except LOAD_ERRORS as exc:
        raise ModelLoadError(
            f"Could not load the VAE {source!r}: {exc}. Check the name or your network, and that its weights "
            "are an AutoencoderKL in safetensors format."
        ) from exc
    fits = [(v.config.latent_channels, 2 ** (len(v.config.block_out_channels) - 1)) for v in (own, new)]
    if fits[0] != fits[1]:
        raise ModelLoadError(
            f"The VAE {source!r} does not fit this model: it has {fits[1][0]} latent channels and "
            f"downsamples by {fits[1][1]}, the model's own VAE {fits[0][0]} and {fits[0][1]}. Choose a VAE "
            "made for this model."
        )
    parameter = next(own.parameters())
    pipe.vae = new.to(device=parameter.device, dtype=parameter.dtype).eval()
