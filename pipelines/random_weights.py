"""Random weights drawn where it is fast: on a CUDA device when its free memory holds them with a quarter to
spare, then moved to the CPU, where the loader returns pipelines. Drawing them takes seconds there, against
over 6 minutes for Flux.1-dev's 17 billion parameters on a 16-core CPU. Seeded either way; a CUDA device draws
other numbers than the CPU (the images are noise either way)."""

from __future__ import annotations

import logging
from collections.abc import Callable

import torch

log = logging.getLogger(__name__)

Models = Callable[[], dict[str, torch.nn.Module]]


def init_device(make: Models, dtype: torch.dtype) -> str:
    """Where `init_models(make, dtype)` draws the weights: "cuda" when its free memory holds them with a
    quarter to spare, else "cpu" (the parameters counted on the meta device, where nothing is allocated)."""
    if not torch.cuda.is_available():
        return "cpu"
    with torch.device("meta"):
        count = sum(p.numel() for part in make().values() for p in part.parameters())
    needed = count * torch.empty((), dtype=dtype).element_size()
    return "cuda" if torch.cuda.mem_get_info()[0] > 1.25 * needed else "cpu"


def init_models(make: Models, dtype: torch.dtype) -> dict[str, torch.nn.Module]:
    """The models `make` builds, their random weights drawn on `init_device`, returned on the CPU."""
    where = init_device(make, dtype)
    with torch.device(where):
        parts = make()
    if where != "cpu":
        for part in parts.values():
            part.to("cpu")
        torch.cuda.empty_cache()
        log.info("drew random weights on %s", torch.cuda.get_device_name())
    return parts
