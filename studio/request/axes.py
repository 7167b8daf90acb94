"""A sweep's second axis (X/Y Compare): steps, size, scheduler, batch size, a LoRA's strength (`lora`: values
`night:0,night:0.5,night:1`, or `none`), or one technique setting such as `deepcache.interval`; its values
checked before anything runs, and a request moved to each value."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any

from pipelines.loras import parse_loras
from pipelines.schedulers import SCHEDULERS
from studio import checks
from studio.errors import ValidationError
from studio.optimizations import REGISTRY, get
from studio.request.generation import (
    MAX_IMAGES,
    MAX_STEPS,
    GenerationRequest,
    _check_settings,
    _side,
    resolve_adapters,
)

AXES = ("steps", "size", "scheduler", "batch", "lora")  # and "<technique>.<setting>"
MAX_VALUES = 8
SETTING_AXIS = re.compile(r"([a-z0-9_]+)\.([a-z0-9_]+)")


@dataclass(frozen=True)
class Axis:
    """The axis a sweep varies besides the configurations, with its values as written (labels)."""

    name: str
    values: tuple[str, ...]
    auto: bool = False  # batch 'auto': the sweep keeps the sizes predicted to fit (`studio.sweeps.xy`)

    @property
    def technique(self) -> str | None:
        """For a setting axis ('deepcache.interval'), the technique; None otherwise."""
        match = SETTING_AXIS.fullmatch(self.name)
        return match[1] if match else None

    def label(self, value: str) -> str:
        return f"{self.name}={value}"


def _split(values: Any) -> list[str]:
    if isinstance(values, list | tuple):
        return [str(v).strip() for v in values if str(v).strip()]
    if not isinstance(values, str):
        raise ValidationError("The axis values must be text such as '1,2,4' or a list.")
    return [v.strip() for v in re.split(r"[,;\s]+", values) if v.strip()]


def auto_batches(request: GenerationRequest) -> list[str]:
    """'auto' for the batch axis: 1, 2, 4, ... up to the largest batch a request may ask for."""
    sizes, size = [], 1
    while size <= MAX_IMAGES:
        sizes.append(str(size))
        size *= 2
    return sizes


def parse_axis(name: Any, values: Any, request: GenerationRequest) -> Axis | None:
    """Check an axis and its values against `request` (each value must make a valid request); None when no
    axis is asked for."""
    name = (name or "").strip() if isinstance(name, str) else name
    if name in (None, "", "none"):
        return None
    if not isinstance(name, str) or (name not in AXES and not SETTING_AXIS.fullmatch(name)):
        raise ValidationError(
            f"Unknown axis {name!r}: choose {', '.join(AXES)}, or a technique setting such as "
            "'deepcache.interval'."
        )
    written = _split(values)
    auto = name == "batch" and written in (["auto"], [])
    if auto:
        written = auto_batches(request)
    if not written:
        raise ValidationError(f"Give the values of the {name} axis, e.g. '2,4,8'.")
    if len(set(written)) != len(written):
        raise ValidationError(f"The {name} axis repeats a value: {', '.join(written)}.")
    if len(written) > MAX_VALUES:
        raise ValidationError(f"The {name} axis has {len(written)} values; the limit is {MAX_VALUES}.")
    axis = Axis(name, tuple(written), auto)
    if axis.technique is not None and axis.technique not in REGISTRY:
        raise ValidationError(f"Unknown technique {axis.technique!r} in the axis {name!r}.")
    for value in written:
        at(request, axis, value)  # every value checked before anything runs
    return axis


def at(request: GenerationRequest, axis: Axis, value: str) -> GenerationRequest:
    """`request` at one value of `axis`; a setting axis leaves configurations without its technique as
    they are."""
    if axis.name == "steps":
        return dataclasses.replace(request, steps=checks.whole("steps", value, 1, MAX_STEPS))
    if axis.name == "batch":
        return dataclasses.replace(request, num_images=checks.whole("batch", value, 1, MAX_IMAGES))
    if axis.name == "scheduler":
        if value not in SCHEDULERS:
            raise ValidationError(f"Unknown scheduler {value!r}; choose one of {', '.join(SCHEDULERS)}.")
        return dataclasses.replace(request, scheduler=value)
    if axis.name == "lora":  # the request's other LoRAs stay; this one is put at the value's scale
        if value == "none":
            return dataclasses.replace(request, loras=())
        (adapter,) = resolve_adapters(request.spec, parse_loras([value]))
        kept = tuple(a for a in request.loras if a.file.path != adapter.file.path)
        return dataclasses.replace(request, loras=(*kept, adapter))
    if axis.name == "size":
        match = re.fullmatch(r"(\d+)(?:x(\d+))?", value)
        if not match:
            raise ValidationError(f"A size is written 512 or 512x768, not {value!r}.")
        width = _side("width", match[1])
        return dataclasses.replace(request, width=width, height=_side("height", match[2] or width))
    technique, setting = SETTING_AXIS.fullmatch(axis.name).groups()
    if technique not in request.opts:
        return request
    if setting not in get(technique).defaults:
        known = ", ".join(get(technique).defaults) or "none"
        raise ValidationError(f"{technique} has no setting {setting!r} (its settings: {known}).")
    given = {**request.settings, technique: {**request.settings.get(technique, {}), setting: value}}
    return dataclasses.replace(request, settings=_check_settings(list(request.opts), given))
