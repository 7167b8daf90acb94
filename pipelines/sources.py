"""Where weights may come from: the allowed roots and allowlist, safetensors only, no code shipped with a
model. `registry.resolve` (models) and `resolve_vae` (a VAE to swap in) check every name here before anything
is loaded; nothing here reads more of a weights file than its header.
"""

from __future__ import annotations

import json
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
MAX_HEADER = 100_000_000  # safetensors' own limit on a header's size


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
    try:
        with resolved.open("rb") as f:
            size = int.from_bytes(f.read(8), "little")
            header = json.loads(f.read(size)) if 2 <= size <= MAX_HEADER else None
    except (OSError, ValueError):  # a JSONDecodeError or a UnicodeDecodeError is a ValueError
        header = None
    if not isinstance(header, dict):
        raise ValidationError(
            f"{what} {str(path)!r} is not a readable .safetensors file (its header is not)."
        )
    header.pop("__metadata__", None)
    return resolved, header


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
        config = json.loads(index.read_text())
        cls = config.get("_class_name", "DiffusionPipeline")
    except (json.JSONDecodeError, AttributeError) as exc:
        raise ValidationError(f"{str(path)!r} has an unreadable model_index.json: {exc}") from None
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
        cls = json.loads((folder / "config.json").read_text()).get("_class_name")
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
