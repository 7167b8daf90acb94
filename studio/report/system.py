"""What the System view shows: every technique and whether it can run here, versions, devices, loaded
pipelines and the run log's path."""

from __future__ import annotations

from typing import Any


def availability(device: str = "auto", family: str | None = None) -> list[dict[str, Any]]:
    """Every technique with whether it can run on `device` here for a model of `family` (None: for some model,
    the models it works on in `works_on`), and why not."""
    from studio import devices
    from studio.optimizations import REGISTRY, unavailable_reason, works_on

    hw = devices.detect()
    resolved = devices.resolve(device, hw)
    return [
        {
            "name": o.name,
            "label": o.label,
            "group": o.group,
            "stage": o.stage,
            "reversible": o.reversible,
            "requires": list(o.requires),
            "conflicts": list(o.conflicts),
            "description": o.description,
            "settings": o.defaults,
            "unavailable": unavailable_reason(o, hw, resolved, family),
            "works_on": works_on(o),
        }
        for o in REGISTRY.values()
    ]


def machine_rows(hardware: dict[str, Any], versions: dict[str, str]) -> list[tuple[str, str]]:
    """This machine as (label, value) rows, from `devices.Hardware.summary()` and the library versions: the
    System view's first table and `python -m studio system`."""
    gpus = ", ".join(f"{g['name']} ({g['memory_gb']} GB, sm {g['capability']})" for g in hardware["gpus"])
    why = "" if hardware["cuda_functional"] else f" — {hardware['cuda_reason']}"
    return [
        ("CPU", f"{hardware['cpu_name']}, {hardware['cpu_count']} cores"),
        ("GPUs", f"{gpus or 'none'}{why}"),
        ("Devices", ", ".join(hardware["devices"])),
        ("Libraries", ", ".join(f"{k} {v}" for k, v in versions.items())),
    ]


def system_facts(studio: Any) -> dict[str, Any]:
    """Devices, capabilities, versions, techniques, loaded pipelines and the run log: what System shows."""
    from studio import devices, settings

    return {
        "hardware": devices.detect().summary(),
        "versions": settings.versions(),
        "techniques": availability(),
        "loaded_pipelines": [list(map(str, k)) for k in studio.manager.loaded()],
        "database": str(studio.runlog.path),
    }
