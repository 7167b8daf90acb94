"""The tensors a compiled package holds inside itself, and whether a module has the same ones.

A package is compiled without weights (`aot_inductor.package_constants_in_so=False`): at load it reads the
live module's tensors (`load_constants`). Not all of them: inductor keeps some inside the compiled code (a
small one such as a Linear's bias, folded into a kernel), which are then the values of the module it was
built from. A package kept for one architecture would compute with those values in a module of the same
architecture whose tensors differ (another fine-tune; a test's freshly initialised module): so each package
records which tensors it holds and a digest of their values (`held`), and a kept package is used only for a
module whose same tensors have the same digest (`same_values`)."""

from __future__ import annotations

import hashlib
from typing import Any

import torch


def _tensors(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    tensors = dict(module.named_parameters(remove_duplicate=False))
    tensors.update(module.named_buffers(remove_duplicate=False))
    return tensors


def _digest(tensors: dict[str, torch.Tensor], names: list[str]) -> str:
    digest = hashlib.sha256()
    for name in names:
        tensor = tensors[name].detach().to("cpu").contiguous().reshape(-1)
        digest.update(f"{name}:{tensor.dtype}:{tensor.numel()};".encode())
        digest.update(tensor.view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()[:32]


def held(module: torch.nn.Module, managed: list[str]) -> dict[str, Any]:
    """What a package built from `module` holds itself: every tensor of the module but the `managed` ones
    (those it reads from the live module: `get_constant_fqns()`), by name, and the digest of their values."""
    tensors = _tensors(module)
    names = sorted(set(tensors) - set(managed))
    return {"tensors": names, "sha256": _digest(tensors, names)}


def same_values(module: torch.nn.Module, holds: dict[str, Any] | None) -> str:
    """'' when `module` has the tensors a package holds, with the same values; else a sentence on why the
    package cannot serve it (a package that does not say what it holds is refused too)."""
    if not isinstance(holds, dict) or not isinstance(holds.get("tensors"), list):
        return "It does not say which of the model's tensors it holds itself."
    tensors = _tensors(module)
    names = holds["tensors"]
    missing = [n for n in names if n not in tensors]
    if missing:
        return f"It holds tensors this model does not have ({', '.join(missing[:3])})."
    if _digest(tensors, names) != holds.get("sha256"):
        shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        return f"It was built from a model whose tensors it holds itself ({shown}) had other values."
    return ""


def variant(module: torch.nn.Module, holds: dict[str, Any] | None) -> str:
    """A short name for `module`'s values of the tensors a package holds itself: a package of the same key
    built for this module is kept under the key and this suffix, beside the other model's."""
    tensors = _tensors(module)
    names = [n for n in (holds or {}).get("tensors") or [] if n in tensors]
    return _digest(tensors, names)[:12]
