"""Every technique with whether it can run on a device here, and why not: the rows the System view, the CLI's
`techniques` and the forms' technique boxes are built from."""

from __future__ import annotations

from typing import Any

from studio import devices
from studio.optimizations.base import REGISTRY, unavailable_reason, works_on


def availability(device: str = "auto", family: str | None = None) -> list[dict[str, Any]]:
    """Every technique with whether it can run on `device` here for a model of `family` (None: for some model,
    the models it works on in `works_on`), and why not."""
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
