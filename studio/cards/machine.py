"""This machine as a card names it: the CPU as `studio.devices` names it (model name, family, model, stepping
and the kernel flags it shows), the GPUs, driver, CUDA, the libraries and the studio's own version; the
fingerprint that tells one machine from another (the hardware only: the same machine with another torch is
the same machine); and `display_name`, the one way every card's machine is named, measured or transcribed."""

from __future__ import annotations

import hashlib
import json
import logging
import re
from importlib import metadata
from typing import Any

log = logging.getLogger(__name__)
EXTRA_PACKAGES = ("openvino", "nncf", "huggingface_hub")
# What can change a configuration's speed: every card records each of them ("not installed" when absent), and
# a regression report lists them side by side (`studio.cards.regression`).
SPEED_LIBRARIES = (
    "torch",
    "diffusers",
    "transformers",
    "accelerate",
    "openvino",
    "nncf",
    "torchao",
    "studio",
)
ABSENT = "not installed"
# What a CPU's model name carries besides the model: trademarks, "CPU", "Processor", core counts, the clock.
_NOISE = re.compile(r"\((?:R|TM)\)|\b(?:CPU|Processor)\b|\b\d+-Core\b|@\s*[\d.]+\s*GHz", re.IGNORECASE)
_SIGNATURE = re.compile(r"family (\d+) model (\d+)")
_AMX = {"amx_bf16", "amx_int8"}
NVIDIA_DRIVER = ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]


def fingerprint(system: dict[str, Any]) -> str:
    """A short hash of the CPU's name, its core count and the GPUs' names and memory."""
    gpus = sorted(f"{g.get('name')}|{g.get('memory_gb')}" for g in system.get("gpus") or [])
    key = json.dumps([system.get("cpu"), system.get("cpu_count"), gpus])
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def zen_generation(model: str, signature: str | None) -> str | None:
    """An AMD CPU's generation from its family and model, which a VM's model name ("AMD EPYC") hides:
    'Zen 3' for family 25 model 1, 'Zen 4' for model 17, 'Zen 5' for family 26; None when not known."""
    found = _SIGNATURE.search(signature or "")
    if "AMD" not in model or not found:
        return None
    family, number = int(found[1]), int(found[2])
    if family == 26:
        return "Zen 5"
    if family == 25:
        return "Zen 4" if number >> 4 in (0x1, 0x6, 0x7, 0xA) else "Zen 3"
    return "Zen 2" if family == 23 and number >= 0x30 else None


def cpu_label(system: dict[str, Any]) -> str:
    """The CPU of a card's `system`, from its recorded fields: the model name without trademarks, clock or
    core count, the AMD generation, "with AMX" when its kernel flags show it, then the family, model and
    stepping and the kernel flags: 'AMD EPYC Zen 3 (family 25 model 1 stepping 1; avx2)'. A card that
    records neither signature nor flags keeps what its `cpu` says in brackets: 'Intel Xeon (Cascade Lake)'.
    """
    cpu = system.get("cpu") or ""
    model = " ".join(_NOISE.sub(" ", system.get("cpu_model") or cpu.split(" (", 1)[0]).split())
    signature, kernels = system.get("cpu_signature"), list(system.get("cpu_kernels") or [])
    generation = zen_generation(model, signature or cpu)  # a schema-0 card has the signature in `cpu` only
    name = " ".join(p for p in (model or "unknown CPU", generation) if p)
    name += " with AMX" if _AMX & set(kernels) else ""
    details = "; ".join(p for p in (signature, " ".join(kernels)) if p)
    if not details and cpu.endswith(")") and " (" in cpu:
        details = cpu.split(" (", 1)[1][:-1]
    return f"{name} ({details})" if details else name


def display_name(system: dict[str, Any]) -> str:
    """How tables, menus and summaries name the machine of a card's `system`, derived from its recorded
    fields alone (a transcribed card's machine reads as a measured one of the same CPU): the CPU
    (`cpu_label`) with its cores, or the GPUs with their host."""
    cores = f", {system['cpu_count']} cores" if system.get("cpu_count") else ""
    gpus = [g["name"] for g in system.get("gpus") or []]
    if gpus:
        return f"{', '.join(gpus)} (host: {cpu_label(system)}{cores})"
    return f"{cpu_label(system)}{cores}"


def _versions() -> dict[str, str]:
    from studio import settings

    found = dict(settings.versions())
    for name in (*EXTRA_PACKAGES, *SPEED_LIBRARIES):
        if name not in found:
            try:
                found[name] = metadata.version(name)
            except metadata.PackageNotFoundError:
                found[name] = ABSENT
    return found


def snapshot(hardware: Any = None) -> dict[str, Any]:
    """This machine for a card (`hardware`: a `studio.devices.Hardware`, default the detected one)."""
    import torch

    from studio import devices, settings

    summary = (hardware or devices.detect()).summary()
    cuda = summary["cuda_functional"]
    system = {
        "cpu": summary["cpu_name"],
        "cpu_model": summary["cpu"],
        "cpu_signature": summary["cpu_signature"] or None,
        "cpu_kernels": summary["cpu_kernels"],
        "cpu_count": summary["cpu_count"],
        "gpus": [
            {"name": g["name"], "memory_gb": g["memory_gb"], "capability": g["capability"]}
            for g in summary["gpus"]
        ],
        "driver": settings.first_line_of(NVIDIA_DRIVER) if cuda else None,
        "cuda": torch.version.cuda if cuda else None,
        "cudnn": torch.backends.cudnn.version() if cuda else None,
        "versions": _versions(),
    }
    return {"name": display_name(system), **system, "fingerprint": fingerprint(system)}


def this_fingerprint() -> str:
    """The running machine's fingerprint."""
    from studio import devices

    summary = devices.detect().summary()
    return fingerprint(
        {
            "cpu": summary["cpu_name"],
            "cpu_count": summary["cpu_count"],
            "gpus": [{"name": g["name"], "memory_gb": g["memory_gb"]} for g in summary["gpus"]],
        }
    )
