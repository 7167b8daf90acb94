"""This machine as a card names it: the CPU as `studio.devices` names it (model name, family, model, stepping
and the kernel flags it shows), the GPUs, driver, CUDA, the libraries and the studio's own version; and the
fingerprint that tells one machine from another (the hardware only: the same machine with another torch is
the same machine)."""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import subprocess
import tomllib
from importlib import metadata
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)
ROOT = Path(__file__).resolve().parents[2]
EXTRA_PACKAGES = ("openvino", "nncf", "huggingface_hub")


def fingerprint(system: dict[str, Any]) -> str:
    """A short hash of the CPU's name, its core count and the GPUs' names and memory."""
    gpus = sorted(f"{g.get('name')}|{g.get('memory_gb')}" for g in system.get("gpus") or [])
    key = json.dumps([system.get("cpu"), system.get("cpu_count"), gpus])
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def display_name(system: dict[str, Any]) -> str:
    """How a table names the machine: the GPUs with their host, or the CPU with its cores."""
    cores = f", {system['cpu_count']} cores" if system.get("cpu_count") else ""
    gpus = [g["name"] for g in system.get("gpus") or []]
    if gpus:
        return f"{', '.join(gpus)} (host: {system.get('cpu') or 'unknown CPU'}{cores})"
    return f"{system.get('cpu') or 'unknown CPU'}{cores}"


def studio_version() -> str:
    """The studio's version (pyproject.toml, else the installed package's), with the commit when the
    checkout is a git repository: '0.1.0+cd0771f'."""
    try:
        version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    except (OSError, KeyError, tomllib.TOMLDecodeError):
        try:
            version = metadata.version("diffusion-studio")
        except metadata.PackageNotFoundError:
            version = "unknown"
    commit = (
        _run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"]) if (ROOT / ".git").exists() else None
    )
    return f"{version}+{commit}" if commit else version


def _run(command: list[str]) -> str | None:
    """A short command's first line of output, or None when it is missing or fails."""
    if shutil.which(command[0]) is None:
        return None
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=10, check=True)
    except (OSError, subprocess.SubprocessError) as exc:
        log.debug("%s failed: %s", command[0], exc)
        return None
    return done.stdout.strip().splitlines()[0] if done.stdout.strip() else None


def _versions() -> dict[str, str]:
    from studio import settings

    found = dict(settings.versions())
    for name in EXTRA_PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = "not installed"
    found["studio"] = studio_version()
    return found


def snapshot(hardware: Any = None) -> dict[str, Any]:
    """This machine for a card (`hardware`: a `studio.devices.Hardware`, default the detected one)."""
    import torch

    from studio import devices

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
        "driver": _run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])
        if cuda
        else None,
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
