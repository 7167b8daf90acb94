"""A pipeline's size without its weights: parameter counts by component and the widths that set its activation
memory, read from the component configs and built on PyTorch's meta device (nothing allocated, nothing read
but `config.json` files). For the memory estimate before a run."""

from __future__ import annotations

import functools
import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import torch

from pipelines.errors import ModelLoadError
from pipelines.registry import PipelineSpec
from pipelines.sources import read_config

LIBRARIES = ("diffusers", "transformers")
MEMORY_SHARE = 0.9  # the share of the memory available now that a model's weights may take


@dataclass(frozen=True)
class Shape:
    """Parameters (and buffers) by component, and the first-level widths of the UNet and the VAE decoder."""

    params: dict[str, int]
    unet_channels: int
    vae_channels: int
    latent_factor: int  # pixels per latent cell along one side (8 for SD's VAE)


def _count(module: torch.nn.Module) -> int:
    return sum(t.numel() for t in [*module.parameters(), *module.buffers()])


def _token_width(config: Any) -> int:
    """A transformer's width per latent pixel: its inner width over the 2x2 latent pixels of a token (SD3's
    patches, Flux's packing), 320 when the config does not say."""
    heads, head_dim = config.get("num_attention_heads"), config.get("attention_head_dim")
    return heads * head_dim // 4 if isinstance(heads, int) and isinstance(head_dim, int) else 320


def shape_of(pipe: Any) -> Shape:
    """The shape of a loaded pipeline (or one built on the meta device)."""
    params = {
        name: _count(part) for name, part in pipe.components.items() if isinstance(part, torch.nn.Module)
    }
    denoiser = getattr(pipe, "unet", None) or getattr(pipe, "transformer", None)
    unet_cfg = getattr(denoiser, "config", {})
    vae_cfg = getattr(getattr(pipe, "vae", None), "config", {})
    unet_channels = (unet_cfg.get("block_out_channels") or [_token_width(unet_cfg)])[0]
    vae_channels = (vae_cfg.get("block_out_channels") or [128])[0]
    factor = 2 ** (len(vae_cfg.get("block_out_channels") or (0, 0, 0, 0)) - 1)
    return Shape(params, int(unet_channels), int(vae_channels), factor)


def _meta_component(folder: Path, library: str, class_name: str) -> torch.nn.Module | None:
    if library not in LIBRARIES or not (folder / "config.json").exists():
        return None
    cls = getattr(importlib.import_module(library), class_name, None)
    if cls is None:
        return None
    with torch.device("meta"):
        if library == "diffusers":
            return cls.from_config(cls.load_config(folder))
        config = cls.config_class.from_pretrained(folder)
        return cls(config)


class _Components:
    """A stand-in with `components` and attributes, as `shape_of` reads a pipeline."""

    def __init__(self, parts: dict[str, torch.nn.Module]):
        self.components = parts
        for name, part in parts.items():
            setattr(self, name, part)


@functools.lru_cache(maxsize=32)
def _folder_shape(folder: str) -> Shape | None:
    index = Path(folder) / "model_index.json"
    if not index.exists():
        return None
    parts = {}
    for name, entry in read_config(index).items():
        if isinstance(entry, list) and len(entry) == 2 and entry[0]:
            module = _meta_component(Path(folder) / name, entry[0], entry[1])
            if module is not None:
                parts[name] = module
    return shape_of(_Components(parts)) if parts else None


@functools.lru_cache(maxsize=4)
def arch_shape(name: str) -> Shape:
    """The shape of a random-weight architecture (`pipelines.architectures`), counted on the meta device."""
    from pipelines.architectures import models

    with torch.device("meta"):
        return shape_of(_Components(models(name)))


def spec_shape(spec: PipelineSpec) -> Shape | None:
    """The shape of a model that is not loaded: the random-weight architectures and local diffusers folders
    (the bundled model included); None for a hub id or a single file (known once loaded)."""
    if spec.source.startswith("arch:"):
        return arch_shape(spec.source.removeprefix("arch:"))
    if getattr(spec, "single_file", False):
        config = getattr(spec, "single_file_config", None)
        return _folder_shape(str(config)) if config else None
    if Path(spec.source).is_dir():
        return _folder_shape(str(Path(spec.source).resolve()))
    return None


def check_memory(spec: PipelineSpec, dtype: torch.dtype, available: int | None = None) -> None:
    """Refuse, before anything is built, a random-weight architecture whose weights alone would not fit in the
    memory available now (`available` bytes; psutil's figure by default), with the arithmetic in the sentence.

    Raises:
        ModelLoadError: parameters x bytes per parameter is more than MEMORY_SHARE of what is available.
    """
    shape = spec_shape(spec) if spec.source.startswith("arch:") else None
    if shape is None:
        return
    count = sum(shape.params.values())
    size = torch.empty((), dtype=dtype).element_size()
    available = psutil.virtual_memory().available if available is None else available
    if count * size <= MEMORY_SHARE * available:
        return
    smaller = " (in bf16 it would need half)" if size == 4 and count * 2 <= MEMORY_SHARE * available else ""
    raise ModelLoadError(
        f"{spec.id} does not fit in this machine's memory: {count / 1e9:.2f} billion parameters x {size} "
        f"bytes ({str(dtype).removeprefix('torch.')}) = {count * size / 2**30:.1f} GiB of weights, and "
        f"{available / 2**30:.1f} GiB is available (a model may take {MEMORY_SHARE:.0%} of it){smaller}. "
        "Use the tiny variant here, or a machine with more memory."
    )
