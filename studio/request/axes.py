"""A sweep's axes besides the configurations (X/Y Compare, an optional second one as Y): steps, size,
scheduler, batch size, seed (values, or `+N`: N seeds from the request's), prompt (AUTOMATIC1111's "Prompt
S/R": the first value is searched in the prompt and each value replaces it), a LoRA's strength (`lora`:
values `night:0,night:0.5,night:1`, or `none`), or one technique setting such as `deepcache.interval`; their
values checked before anything runs, and a request moved to each value."""

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
    MAX_SEED,
    MAX_STEPS,
    GenerationRequest,
    _check_settings,
    _side,
    resolve_adapters,
)

AXES = ("steps", "size", "scheduler", "batch", "seed", "prompt", "lora")  # and "<technique>.<setting>"
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


def _split(values: Any, separators: str = r"[,;\s]+") -> list[str]:
    if isinstance(values, list | tuple):
        return [str(v).strip() for v in values if str(v).strip()]
    if not isinstance(values, str):
        raise ValidationError("The axis values must be text such as '1,2,4' or a list.")
    return [v.strip() for v in re.split(separators, values) if v.strip()]


def _written(name: str, values: Any, request: GenerationRequest) -> list[str]:
    """An axis's values as written, with the shorthands expanded: the prompt axis's values are separated by
    commas alone (a value may hold spaces), and `+N` on the seed axis is N seeds from the request's."""
    if name == "prompt":
        return _split(values, r",")
    written = _split(values)
    if name == "seed" and len(written) == 1 and written[0].startswith("+"):
        count = checks.whole("seed count", written[0][1:], 1, MAX_VALUES)
        return [str((request.seed + i) % (MAX_SEED + 1)) for i in range(count)]
    return written


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
    written = _written(name, values, request)
    auto = name == "batch" and written in (["auto"], [])
    if auto:
        written = auto_batches(request)
    if not written:
        raise ValidationError(f"Give the values of the {name} axis, e.g. '2,4,8'.")
    if len(set(written)) != len(written):
        raise ValidationError(f"The {name} axis has a value twice: {', '.join(written)}.")
    if len(written) > MAX_VALUES:
        raise ValidationError(f"The {name} axis has {len(written)} values; the limit is {MAX_VALUES}.")
    axis = Axis(name, tuple(written), auto)
    if name == "prompt" and written[0] not in request.prompt:
        raise ValidationError(
            f"The prompt axis searches the prompt for its first value, {written[0]!r}, and replaces it with "
            "each value in turn; the prompt does not contain it."
        )
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
        return dataclasses.replace(request, batch=checks.whole("batch", value, 1, MAX_IMAGES))
    if axis.name == "seed":
        return dataclasses.replace(request, seed=checks.whole("seed", value, 0, MAX_SEED))
    if axis.name == "prompt":  # Prompt S/R: every occurrence of the first value
        return dataclasses.replace(request, prompt=request.prompt.replace(axis.values[0], value))
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
    if technique not in request.optimizations:
        return request
    if setting not in get(technique).defaults:
        known = ", ".join(get(technique).defaults) or "none"
        raise ValidationError(f"{technique} has no setting {setting!r} (its settings: {known}).")
    given = {**request.settings, technique: {**request.settings.get(technique, {}), setting: value}}
    return dataclasses.replace(request, settings=_check_settings(list(request.optimizations), given))


def parse_axes(
    x_name: Any, x_values: Any, y_name: Any, y_values: Any, request: GenerationRequest
) -> tuple[Axis | None, Axis | None]:
    """An X axis and an optional Y axis, each checked against `request` and against each other: every
    (X, Y) pair makes a valid request."""
    x_axis = parse_axis(x_name, x_values, request)
    y_axis = parse_axis(y_name, y_values, request)
    if y_axis is None:
        return x_axis, None
    if x_axis is None:
        raise ValidationError(f"A Y axis ({y_axis.name}) needs an X axis: give the X axis first.")
    if y_axis.name == x_axis.name:
        raise ValidationError(f"The X and Y axes are both {x_axis.name}: choose two different axes.")
    if x_axis.auto or y_axis.auto:
        raise ValidationError("Batch 'auto' is for an X axis alone: give the batch sizes with a Y axis.")
    for x in x_axis.values:
        for y in y_axis.values:
            at(at(request, x_axis, x), y_axis, y)
    return x_axis, y_axis
