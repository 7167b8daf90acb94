"""Sharded safetensors checkpoints: save a pipeline's models in shards, list the shards.

Big checkpoints are easier to download, cache and place over devices when each
model's weights are split into shards of at most `max_shard_size` bytes (the
diffusers docs recommend sharding above ~5 GB in fp32). `save_sharded` writes a
complete diffusers directory: every model component through its own
`save_pretrained(max_shard_size=...)` (a `*.safetensors.index.json` maps each
tensor to its shard), the tokenizer, scheduler and `model_index.json` copied
beside them. The result loads with `DiffusionPipeline.from_pretrained` and, when
it lies under an allowed root, through `pipelines.registry.resolve()` like any
local directory; `shard_into_home` writes under the studio's home, which the studio always loads from.
"""

from __future__ import annotations

import inspect
import logging
import re
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from pipelines import loader, registry
from pipelines.sources import allow_written, read_config, read_header
from studio import settings
from studio.errors import ValidationError

log = logging.getLogger(__name__)

UNITS = {
    "": 1,
    "B": 1,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "TB": 10**12,
    "KIB": 2**10,
    "MIB": 2**20,
    "GIB": 2**30,
}
SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*$")
MIN_SHARD = 10**3
INDEX_SUFFIX = ".safetensors.index.json"


@dataclass(frozen=True)
class Shard:
    """One safetensors file of a component."""

    file: str
    bytes: int
    tensors: int


@dataclass
class ComponentShards:
    """The weight files of one pipeline component, as its index describes them."""

    name: str
    index: str | None
    total_size: int
    shards: list[Shard] = field(default_factory=list)

    @property
    def sharded(self) -> bool:
        return self.index is not None


def parse_size(value: int | str) -> int:
    """Turn "1MB", "500KB", "2GiB" or a number of bytes into bytes (KB/MB/GB are powers of 10, as on the hub).

    Raises:
        ValidationError: the size cannot be read or is below 1KB.
    """
    if isinstance(value, int) and not isinstance(value, bool):
        number, unit = float(value), ""
    else:
        match = SIZE.match(str(value))
        if not match or match.group(2).upper() not in UNITS:
            raise ValidationError(
                f"max shard size {value!r} is not a size; write it like 500KB, 1MB, 5GB or 2GiB."
            )
        number, unit = float(match.group(1)), match.group(2).upper()
    size = int(number * UNITS[unit])
    if size < MIN_SHARD:
        raise ValidationError(f"max shard size {value!r} is too small; use at least 1KB.")
    return size


def _is_model(component: Any) -> bool:
    return isinstance(component, torch.nn.Module) and hasattr(component, "save_pretrained")


def _save_model(model: torch.nn.Module, target: Path, max_bytes: int) -> None:
    """`save_pretrained` in shards; safetensors asked for explicitly where the API still has the switch."""
    kwargs: dict[str, Any] = {"max_shard_size": max_bytes}
    if "safe_serialization" in inspect.signature(model.save_pretrained).parameters:
        kwargs["safe_serialization"] = True  # diffusers; transformers 5 writes safetensors only
    model.save_pretrained(target, **kwargs)
    pickled = sorted(p.name for p in target.glob("*.bin"))
    if pickled:
        raise RuntimeError(
            f"{target} received non-safetensors weights {pickled}; upgrade diffusers/transformers."
        )


def _copy_other(name: str, component: Any, source: Path | None, out: Path) -> None:
    """Tokenizer, scheduler, feature extractor: copied verbatim from a local source, else re-saved."""
    if source is not None and (source / name).is_dir():
        shutil.copytree(source / name, out / name)
    elif hasattr(component, "save_pretrained"):
        component.save_pretrained(out / name)
    else:
        raise ValidationError(
            f"Component {name!r} ({type(component).__name__}) cannot be saved; it has no save_pretrained."
        )


def _check_out(out: str | Path) -> Path:
    """The output directory, resolved; refused if it holds anything (stale shards would mix in)."""
    path = Path(out).expanduser().resolve()
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise ValidationError(
            f"Output directory {str(path)!r} exists and is not empty; choose a new or empty directory."
        )
    return path


def save_sharded(
    pipe: Any, out_dir: str | Path, max_shard_size: int | str, source: str | Path | None = None
) -> list[ComponentShards]:
    """Write `pipe` as a complete diffusers directory whose models are sharded safetensors.

    Args:
        pipe: a loaded diffusers pipeline (on the CPU).
        out_dir: a new or empty directory.
        max_shard_size: the largest shard, e.g. "1MB", "5GB" or a number of bytes.
        source: the pipeline's local directory, if any: tokenizer, scheduler and model_index.json are copied
        from it.

    Returns:
        The shards of every component, as `list_shards(out_dir)` reads them back.
    """
    max_bytes = parse_size(max_shard_size)
    out = _check_out(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    src = Path(source) if source is not None and Path(source).is_dir() else None
    for name, component in pipe.components.items():
        if component is None:
            continue
        if _is_model(component):
            _save_model(component, out / name, max_bytes)
        else:
            _copy_other(name, component, src, out)
    if src is not None and (src / "model_index.json").is_file():
        shutil.copy2(src / "model_index.json", out / "model_index.json")
    else:
        pipe.save_config(out)
    log.info("saved %s in shards of at most %d bytes to %s", type(pipe).__name__, max_bytes, out)
    return list_shards(out)


def _component_shards(folder: Path) -> ComponentShards | None:
    indexes = sorted(folder.glob(f"*{INDEX_SUFFIX}"))
    if indexes:
        try:
            data = read_config(indexes[0])
            counts: dict[str, int] = {}
            for file in data["weight_map"].values():
                counts[file] = counts.get(file, 0) + 1
            shards = [Shard(f, (folder / f).stat().st_size, n) for f, n in sorted(counts.items())]
            total = int(data.get("metadata", {}).get("total_size", sum(s.bytes for s in shards)))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ValidationError(
                f"{indexes[0]} is not a readable shard index ({exc}); fix or remove it."
            ) from exc
        return ComponentShards(folder.name, indexes[0].name, total, shards)
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        return None
    shards = [Shard(f.name, f.stat().st_size, _tensor_count(f)) for f in files]
    return ComponentShards(folder.name, None, sum(s.bytes for s in shards), shards)


def _tensor_count(path: Path) -> int:
    """Tensors in one safetensors file, read from its JSON header (no weights are loaded)."""
    return len(read_header(path, "Shard"))


def list_shards(directory: str | Path) -> list[ComponentShards]:
    """The weight files of each component of a diffusers directory, from its `*.safetensors.index.json` files.

    Args:
        directory: a diffusers pipeline directory (sharded or not; unsharded components list one file).
    """
    root = Path(directory)
    if not (root / "model_index.json").is_file():
        raise ValidationError(f"{str(root)!r} is not a diffusers pipeline directory (no model_index.json).")
    found = (_component_shards(p) for p in sorted(root.iterdir()) if p.is_dir())
    return [c for c in found if c is not None]


def loadable(directory: str | Path) -> bool:
    """Whether the studio will accept `directory` as a model (it lies under one of
    `registry.allowed_roots()`)."""
    resolved = Path(directory).expanduser().resolve()
    return any(resolved.is_relative_to(root) for root in registry.allowed_roots())


def shard_model(
    model: str, out_dir: str | Path, max_shard_size: int | str, dtype: torch.dtype = torch.float32
) -> dict[str, Any]:
    """Load `model` on the CPU (registry id, hub id or local directory) and save it sharded.

    Args:
        model: what to shard, as a request would name it.
        out_dir: a new or empty directory.
        max_shard_size: the largest shard ("1MB", "5GB", bytes).
        dtype: the weights dtype to save in.

    Returns:
        A JSON-friendly report: output directory, shard size, components with their shards, and whether
        the studio can load the directory as it stands (see `STUDIO_MODEL_ROOTS`).
    """
    max_bytes = parse_size(max_shard_size)
    out = _check_out(out_dir)
    spec = registry.resolve(model)
    pipe = loader.load(spec, dtype=dtype)
    components = save_sharded(pipe, out, max_bytes, source=spec.source if spec.local else None)
    return {
        "model": spec.id,
        "out": str(out),
        "max_shard_size": max_bytes,
        "components": [dict(asdict(c), sharded=c.sharded) for c in components],
        "loadable": loadable(out),
    }


def shard_into_home(model: str, name: str, max_shard_size: int | str) -> dict[str, Any]:
    """`model` saved sharded under the studio's home (`sharded/<name>`), a folder the studio then loads
    whatever `STUDIO_MODEL_ROOTS` says (a request's `model`: the report's `out`).

    `name` is a folder name (what the UI and the API accept, `studio.request.validate_shard_target`), or, for
    the local user of the CLI (`--out`), an absolute directory, written as given.
    """
    folder = settings.home() / "sharded"
    allow_written(folder)
    out = Path(name) if Path(name).is_absolute() else folder / name
    return shard_model(model, out, max_shard_size)
