"""Where weights may come from: the allowed roots and allowlist, safetensors only, no code shipped with a
model. `registry.resolve` (models) and `resolve_vae` (a VAE to swap in) check every name here before anything
is loaded; nothing here reads more of a weights file than its header.
"""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path
from typing import Any

from pipelines.errors import ValidationError

ROOT = Path(__file__).resolve().parent.parent
ASSETS = ROOT / "assets"
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]{0,95}/[\w.-]{1,96}$")
# Formats torch.load reads with pickle: loading one can run code.
PICKLE_SUFFIXES = (".ckpt", ".pt", ".pth", ".bin", ".pkl", ".pickle")
UNET, VAE, CLIP = "model.diffusion_model.", "first_stage_model.", "cond_stage_model.transformer."
# diffusers' own sign of an SDXL checkpoint (single_file_utils.CHECKPOINT_KEY_NAMES["xl_base"])
SDXL_KEY = "conditioner.embedders.1.model.transformer.resblocks.9.mlp.c_proj.bias"
MAX_HEADER = 16 * 2**20  # bytes of a header read: an SDXL checkpoint's is ~250 kB (safetensors allows 100 MB)
MAX_CONFIG = 2**20  # bytes of a model_index.json or config.json read
ITEM_BYTES = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E4M3FNUZ": 1, "F8_E5M2FNUZ": 1}
ITEM_BYTES |= {"I16": 2, "U16": 2, "F16": 2, "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8}
ITEM_BYTES |= {"F64": 8, "C64": 8}  # other dtypes (sub-byte ones) are left to safetensors to check
# what a weights file that is not safetensors starts with: torch.save's zip archive, a bare pickle
IMPOSTORS = {b"PK\x03\x04": "a PyTorch zip checkpoint (pickle inside)", b"\x80": "a pickle"}


_WRITTEN_ROOTS: list[Path] = []  # folders the studio itself writes models into (`allow_written`)


def allow_written(folder: Path) -> None:
    """Let models the studio writes under `folder` (its sharded copies) load from there, whatever
    `STUDIO_MODEL_ROOTS` says: what the studio writes, it can load."""
    resolved = folder.expanduser().resolve()
    if resolved not in _WRITTEN_ROOTS:
        _WRITTEN_ROOTS.append(resolved)


def allowed_roots() -> list[Path]:
    """Directories local models may be loaded from: assets/, `STUDIO_MODEL_ROOTS` (else the cwd) and the
    folders the studio writes models into."""
    extra = os.environ.get("STUDIO_MODEL_ROOTS")
    roots = [Path(p) for p in extra.split(os.pathsep) if p] if extra else [Path.cwd()]
    return [ASSETS.resolve(), *(r.resolve() for r in roots), *_WRITTEN_ROOTS]


def allowlist(space_default: tuple[str, ...] = ()) -> set[str] | None:
    """The names a request may load, or None for any: `STUDIO_MODEL_ALLOWLIST` (comma-separated; `*` for
    any), else on a Hugging Face Space (`SPACE_ID` set) `space_default`, else None. A Space's visitors
    cannot make it download whatever they name unless its owner widens the list."""
    raw = os.environ.get("STUDIO_MODEL_ALLOWLIST")
    if raw is not None and raw.strip():
        names = {x.strip() for x in raw.split(",") if x.strip()}
        return None if "*" in names else names
    return set(space_default) if os.environ.get("SPACE_ID") else None


def check_allowed(name: str, what: str = "Model", space_default: tuple[str, ...] = ()) -> None:
    """Refuse `name` when the allowlist (`allowlist`) does not list it."""
    allow = allowlist(space_default)
    if allow is not None and name not in allow:
        where = (
            "STUDIO_MODEL_ALLOWLIST" if os.environ.get("STUDIO_MODEL_ALLOWLIST") else "this Space's allowlist"
        )
        raise ValidationError(
            f"{what} {name!r} is not in {where} ({', '.join(sorted(allow)) or 'empty'}); the owner widens it "
            "with the STUDIO_MODEL_ALLOWLIST variable (comma-separated names, * for any)."
        )


def refuse_pickle(name: str, what: str = "Model") -> None:
    """Refuse a pickle checkpoint by its name, before anything opens it."""
    suffix = Path(name).suffix.lower()
    if suffix in PICKLE_SUFFIXES:
        raise ValidationError(
            f"{what} {name!r} is a pickle checkpoint ({suffix}), and loading a pickle can run code: the "
            "studio loads only .safetensors files. Convert it once on a machine you trust and pass the "
            ".safetensors file."
        )


def inside_roots(path: Path, what: str) -> Path:
    """`path` resolved, or ValidationError when it lies outside the allowed roots."""
    resolved = path.expanduser().resolve()
    if not any(resolved.is_relative_to(root) for root in allowed_roots()):
        raise ValidationError(
            f"{what} {str(path)!r} is outside the allowed roots; add its parent to STUDIO_MODEL_ROOTS to "
            "allow it."
        )
    return resolved


def safetensors_file(path: Path, what: str) -> tuple[Path, dict[str, Any]]:
    """A local `.safetensors` file inside the roots, and its tensors' names and shapes (read from its header
    only: no tensor data, nothing executed)."""
    resolved = inside_roots(path, what)
    if not resolved.is_file():
        raise ValidationError(f"{what} {str(path)!r} does not exist.")
    if resolved.suffix != ".safetensors":
        raise ValidationError(
            f"{what} {str(path)!r} is not a .safetensors file; the studio loads only those."
        )
    return resolved, read_header(resolved, what)


def _unreadable(
    path: Path, what: str, why: str, fix: str = "Download or convert it again."
) -> ValidationError:
    return ValidationError(f"{what} {str(path)!r} is not a readable .safetensors file: {why}. {fix}")


def _tensor_problem(entry: Any, data_bytes: int) -> str | None:
    """What is wrong with one tensor's header entry (dtype, shape, data offsets) in a file of `data_bytes`
    bytes of data, or None."""
    if not isinstance(entry, dict):
        return "is not described by an object"
    dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
    if not isinstance(dtype, str) or not isinstance(shape, list) or not all(type(d) is int for d in shape):
        return "has no dtype or no shape of whole numbers"
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(type(o) is int for o in offsets)):
        return "has no data offsets"
    if not 0 <= offsets[0] <= offsets[1] or min(shape, default=0) < 0:
        return f"has offsets {offsets} or a shape {shape} that cannot be"
    if offsets[1] > data_bytes:
        return f"ends at byte {offsets[1]:,} of data, past the file's {data_bytes:,}: the file is truncated"
    if dtype in ITEM_BYTES and math.prod(shape) * ITEM_BYTES[dtype] != offsets[1] - offsets[0]:
        return f"of shape {shape} in {dtype} does not fill its {offsets[1] - offsets[0]:,} bytes"
    return None


def read_header(path: Path, what: str = "Weights file") -> dict[str, Any]:
    """The tensors (names, dtypes, shapes, offsets) a .safetensors file's header lists, checked against the
    file before any loader sees it: a length that fits the file, at most `MAX_HEADER` bytes of JSON, and
    every tensor inside the data that follows. A pickle renamed .safetensors, a truncated file or a header
    that lies is refused with a sentence."""
    try:
        size = path.stat().st_size
        with path.open("rb") as f:
            start = f.read(8)
            length = int.from_bytes(start, "little")
            raw = f.read(length) if 2 <= length <= min(MAX_HEADER, size - 8) else b""
    except OSError as exc:
        raise _unreadable(path, what, f"it could not be read ({exc.strerror or exc})") from None
    for magic, kind in IMPOSTORS.items():  # a header starts with "{"; a length may start with 0x80
        if start.startswith(magic) and not raw.startswith(b"{"):
            why = f"it is {kind} renamed .safetensors, and loading a pickle can run code"
            raise _unreadable(path, what, why, "Convert it once on a machine you trust and pass that file.")
    if not raw:
        why = f"its header claims {length:,} bytes, the file holds {max(size - 8, 0):,} after the length"
        if MAX_HEADER < length <= size - 8:
            why = f"its header is {length:,} bytes; the studio reads at most {MAX_HEADER:,}"
        raise _unreadable(path, what, why if length > 1 else "it is too short to hold a header")
    try:
        header = json.loads(raw)
    except UnicodeDecodeError:
        raise _unreadable(path, what, "its header is not UTF-8 text") from None
    except RecursionError:  # the C parser's own depth limit: no checkpoint's header nests past 3
        raise _unreadable(path, what, "its header nests deeper than any checkpoint's") from None
    except ValueError as exc:  # a JSONDecodeError, or a number of over 4,300 digits
        raise _unreadable(path, what, f"its header is not JSON ({exc})") from None
    if not isinstance(header, dict):
        raise _unreadable(path, what, "its header is not a JSON object")
    header.pop("__metadata__", None)
    for name, entry in header.items():
        problem = _tensor_problem(entry, size - 8 - length)
        if problem:
            raise _unreadable(path, what, f"its tensor {name[:80]!r} {problem}")
    return header


def read_config(path: Path) -> Any:
    """A model's JSON config (model_index.json, config.json) of at most `MAX_CONFIG` bytes, parsed; raises
    OSError, or ValueError for one that is too large, not JSON or nested past Python's limit."""
    if path.stat().st_size > MAX_CONFIG:
        raise ValueError(f"it is over {MAX_CONFIG:,} bytes")
    try:
        return json.loads(path.read_bytes())
    except RecursionError:
        raise ValueError("it nests too deeply") from None


def numels(header: dict[str, Any], prefix: str = "") -> list[int]:
    """The sizes of the tensors under `prefix`, sorted: an architecture's fingerprint whatever its names."""
    sizes = []
    for name, entry in header.items():
        if name.startswith(prefix) and not name.endswith("position_ids"):
            n = 1
            for dim in entry.get("shape", ()):
                n *= dim
            sizes.append(n)
    return sorted(sizes)


def _folder_header(folder: Path) -> dict[str, Any]:
    """The merged safetensors headers of a diffusers component folder (e.g. assets/tiny-shapes/unet)."""
    header: dict[str, Any] = {}
    for file in sorted(folder.glob("*.safetensors")):
        header.update(safetensors_file(file, "Weights file")[1])
    return header


def same_architecture(header: dict[str, Any], folder: str | Path) -> bool:
    """Whether a single-file checkpoint (its header) has exactly the architecture of a local diffusers
    pipeline folder: the same tensor sizes in its UNet, VAE and text encoder, so the folder's configs fit."""
    folder = Path(folder)
    if not (folder / "model_index.json").is_file():
        return False
    parts = ((UNET, "unet"), (VAE, "vae"), (CLIP, "text_encoder"))
    return all(numels(header, prefix) == numels(_folder_header(folder / sub)) for prefix, sub in parts)


def pipeline_folder(path: Path, what: str) -> tuple[Path, str]:
    """A local diffusers pipeline folder inside the roots and its pipeline class, refused when it asks for
    code shipped with it or keeps a component's weights only as pickles."""
    resolved = inside_roots(path, what)
    index = resolved / "model_index.json"
    if not index.is_file():
        raise ValidationError(f"{str(path)!r} is not a diffusers pipeline directory (no model_index.json).")
    try:
        cls = read_config(index).get("_class_name", "DiffusionPipeline")
    except (OSError, ValueError, AttributeError) as exc:
        raise ValidationError(
            f"{str(path)!r} has an unreadable model_index.json ({exc}); fix or replace the folder."
        ) from None
    if not isinstance(cls, str) or not cls.isidentifier():
        raise ValidationError(
            f"{str(path)!r} asks for custom pipeline code ({cls!r}); the studio never runs code shipped with "
            "a model."
        )
    for component in (p for p in resolved.iterdir() if p.is_dir()):
        pickles = [f.name for f in component.iterdir() if f.suffix in PICKLE_SUFFIXES]
        if pickles and not any(component.glob("*.safetensors")):
            raise ValidationError(
                f"{str(path)!r} keeps the {component.name} weights only as pickles ({pickles[0]}); the "
                "studio loads only .safetensors weights."
            )
    return resolved, cls


def _vae_folder(path: Path) -> str:
    resolved = inside_roots(path, "VAE directory")
    folder = resolved if (resolved / "config.json").is_file() else resolved / "vae"
    try:
        cls = read_config(folder / "config.json").get("_class_name")
    except (OSError, ValueError, AttributeError):
        raise ValidationError(
            f"VAE {str(path)!r} is not a diffusers VAE folder (no readable config.json, nor vae/config.json)."
        ) from None
    if cls != "AutoencoderKL":
        raise ValidationError(f"VAE {str(path)!r} is a {cls!r}; the studio swaps in an AutoencoderKL.")
    if not any(folder.glob("*.safetensors")):
        raise ValidationError(f"VAE {str(path)!r} has no .safetensors weights; the studio loads only those.")
    return str(resolved)


def resolve_vae(name: Any) -> str | None:
    """A VAE to swap into a pipeline, as a request names it -> where to load it from, or None for the
    pipeline's own.

    Accepted: a local diffusers AutoencoderKL folder (or a pipeline folder: its vae/), a `.safetensors` file
    in the original (LDM) or diffusers layout, both inside the allowed roots, or a hub id of an AutoencoderKL
    repository.
    """
    if name is None or (isinstance(name, str) and not name.strip()):
        return None
    if not isinstance(name, str):
        raise ValidationError(f"vae must be text (a folder, a .safetensors file or a hub id), not {name!r}.")
    name = name.strip()
    refuse_pickle(name, "VAE")
    check_allowed(name, "VAE")
    path = Path(name).expanduser()
    if path.suffix == ".safetensors" or path.is_file():
        resolved, header = safetensors_file(path, "VAE file")
        if not any(key.endswith("decoder.conv_in.weight") for key in header):
            raise ValidationError(
                f"VAE file {name!r} holds no VAE decoder weights (no decoder.conv_in.weight)."
            )
        return str(resolved)
    if name.startswith((".", "/", "~")) or path.is_dir():
        return _vae_folder(path)
    if HUB_ID.match(name) and ".." not in name:
        return name
    raise ValidationError(
        f"Unknown VAE {name!r}: use a local AutoencoderKL folder, a .safetensors file or a hub id like "
        "'stabilityai/sd-vae-ft-mse'."
    )
