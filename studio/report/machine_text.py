"""This machine in words: the System view's first table and `python -m studio system`."""

from __future__ import annotations

from typing import Any


def machine_rows(hardware: dict[str, Any], versions: dict[str, str]) -> list[tuple[str, str]]:
    """This machine as (label, value) rows, from `devices.Hardware.summary()` and the library versions: the
    System view's first table and `python -m studio system`."""
    gpus = ", ".join(f"{g['name']} ({g['memory_gb']} GB, sm {g['capability']})" for g in hardware["gpus"])
    why = "" if hardware["cuda_functional"] else f" — {hardware['cuda_reason']}"
    return [
        ("CPU", f"{hardware['cpu_name']}, {hardware['cpu_count']} cores"),
        *([("RAM", f"{hardware['ram_gb']:g} GB")] if hardware.get("ram_gb") else []),
        ("GPUs", f"{gpus or 'none'}{why}"),
        ("Devices", ", ".join(hardware["devices"])),
        ("Libraries", ", ".join(f"{k} {v}" for k, v in versions.items())),
    ]
