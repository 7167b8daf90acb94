"""Load a pipeline from a spec with the real diffusers loader, safetensors only, no remote code."""

from __future__ import annotations

import logging
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
    return (getattr(diffusers, cls) if cls else type(base)).from_config(base.config, **overrides)


def pipeline_class(spec: PipelineSpec) -> type:
    cls = getattr(diffusers, spec.pipeline_class, None)
    if cls is None or not issubclass(cls, diffusers.DiffusionPipeline):
        raise ModelLoadError(
            f"{spec.pipeline_class!r} is not a diffusers pipeline class this studio can load."
        )
    return cls


def load(
    spec: PipelineSpec,
    dtype: torch.dtype = torch.float32,
    device_map: str | None = None,
    max_memory: dict | None = None,
) -> Any:
    """Read a pipeline from disk or the hub, on the CPU unless a device map says otherwise.

    Args:
        spec: what to load.
        dtype: weights dtype.
        device_map: None or "balanced" (accelerate places the models over GPUs).
        max_memory: per-device caps for the device map, e.g. {0: "4GB", "cpu": "16GB"}.

    Raises:
        ModelLoadError: missing, corrupt, not safetensors, or not a loadable pipeline.
    """
    if spec.source.startswith("arch:"):
        from pipelines.architectures import build
        from pipelines.registry import SPECS

        pipe = build(spec.source.removeprefix("arch:"), SPECS["tiny-shapes"].source, dtype)
        pipe.set_progress_bar_config(disable=True)
        return pipe
    kwargs: dict[str, Any] = dict(spec.load_kwargs, dtype=dtype, use_safetensors=True)
    if device_map:
        kwargs.update(device_map=device_map, max_memory=max_memory)
    cls = pipeline_class(spec)
    try:
        pipe = cls.from_pretrained(spec.source, **kwargs)
    except (OSError, ValueError, RuntimeError, SafetensorError) as exc:
        raise ModelLoadError(
            f"Could not load {spec.id!r} from {spec.source!r}: {exc}. Check the name, your network or "
            "HF_TOKEN for gated models, and that the weights are in safetensors format."
        ) from exc
    pipe.set_progress_bar_config(disable=True)
    log.info("loaded %s (%s) as %s", spec.id, dtype, type(pipe).__name__)
    return pipe
