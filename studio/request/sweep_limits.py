"""How much a sweep or an auto-tune may measure: counts checked, work bounded and estimated before anything
runs."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

from pipelines import registry
from studio import checks
from studio.errors import ValidationError
from studio.request.configs import parse_opts
from studio.request.quality_floor import Floor

if TYPE_CHECKING:  # annotations only: the settings' defaults import without torch (the CLI's --help)
    from studio.request.generation import GenerationRequest

MAX_CONFIGS = 16  # configurations in one Compare (the baseline included)
MAX_WARMUP = 10
MAX_ROUNDS = 50


def max_request_seconds() -> float:
    """The longest a request may be estimated to take (`STUDIO_MAX_REQUEST_S`, default one hour)."""
    return float(os.environ.get("STUDIO_MAX_REQUEST_S", "3600"))


@dataclass(frozen=True, kw_only=True)
class AutotuneSettings:
    """The auto-tuner's options, built by name from a form, a client, an MCP tool or argv (numbers may arrive
    as text) and checked as they are built: the quality floor, the measurement counts, the techniques to
    search (None: every candidate here) and whether torch.compile's minutes-long candidates are tried."""

    floor: Floor = Floor()
    warmup: int = 1
    rounds: int = 3
    confirm_rounds: int = 5
    techniques: tuple[str, ...] | None = None
    include_compile: bool = False

    def __post_init__(self) -> None:
        checked = dict(
            warmup=checks.whole("warm-up calls", self.warmup, 0, MAX_WARMUP),
            rounds=checks.whole("rounds", self.rounds, 1, MAX_ROUNDS),
            confirm_rounds=checks.whole("confirmation rounds", self.confirm_rounds, 1, MAX_ROUNDS),
            techniques=tuple(parse_opts(self.techniques)) or None,
            include_compile=checks.boolean("include_compile", self.include_compile or False),
        )
        for name, value in checked.items():
            object.__setattr__(self, name, value)

    @classmethod
    def of(cls, values: Mapping[str, Any]) -> AutotuneSettings:
        """The settings from whatever a face holds (a handler's or a tool's arguments, argparse's namespace
        as a dict), by name: the floor's `min_psnr`, `min_ssim` and `fidelity_drop` beside the others; a
        setting left empty (None) keeps its default, and the other names are left."""
        named = {k: v for k, v in values.items() if v is not None}
        own = {f.name: named[f.name] for f in fields(cls) if f.name in named and f.name != "floor"}
        return cls(floor=Floor.of(values), **own)


@dataclass(frozen=True)
class SweepCounts:
    """How much a sweep measures: untimed warm-up calls and timed rounds per configuration."""

    warmup: int
    rounds: int


def validate_counts(warmup: Any, rounds: Any) -> SweepCounts:
    """Warm-up calls (0 or more) and rounds (1 or more) of a sweep, from a form, a client or argv."""
    return SweepCounts(
        checks.whole("warm-up calls", warmup, 0, MAX_WARMUP), checks.whole("rounds", rounds, 1, MAX_ROUNDS)
    )


def estimated_seconds(request: GenerationRequest, calls: int) -> float:
    """A rough time for `calls` pipeline calls of `request`: its model's assumed step time, scaled by image
    size and, on a CPU, by the model's CPU factor."""
    cost = registry.cost_of(request.spec)
    step = cost.step * (request.width * request.height) / cost.pixels * request.batch
    if request.device == "cpu":
        step *= cost.cpu_factor
    return calls * request.steps * step


def check_sweep(
    requests: list[GenerationRequest],
    counts: SweepCounts,
    max_configs: int | None = MAX_CONFIGS,
) -> None:
    """Refuse, before anything runs, a sweep with no configuration, too many (`max_configs`: None for a sweep
    whose configurations come from the registry, not from the user; an X/Y sweep passes its own limit), or
    too long an estimate (every configuration at its own steps, size and batch)."""
    configurations = len(requests)
    if configurations < 2:
        raise ValidationError("Choose at least one configuration to compare with the baseline.")
    if max_configs is not None and configurations > max_configs:
        raise ValidationError(
            f"{configurations} configurations in one sweep; the limit is {max_configs} "
            "(the baseline included). Split it into several."
        )
    calls = counts.warmup + counts.rounds
    seconds = sum(estimated_seconds(r, calls) for r in requests)
    if seconds > max_request_seconds():
        first = requests[0]
        raise ValidationError(
            f"This sweep would take about {seconds / 60:.0f} min ({configurations} configurations x "
            f"{calls} calls, {first.steps} steps at {first.width}x{first.height} for the baseline); the "
            f"limit is {max_request_seconds() / 60:.0f} min (STUDIO_MAX_REQUEST_S). Use fewer rounds, steps, "
            "configurations or axis values, or a smaller size."
        )


COMBINATIONS_INCLUDE = ("auto", "yes", "no")  # include_compile: when the time allows, always, never
INCLUDE_FLAGS = {True: "yes", False: "no", None: "auto"}
MAX_COMBINATIONS_CELLS = 10_000


@dataclass(frozen=True, kw_only=True)
class CombinationsOptions:
    """What a Combinations run may measure, checked as it is built: whether techniques that build on
    their first call (compile, trace, convert, calibrate) are in ('auto', 'yes', 'no'; True, False and None
    read as yes, no and auto) and the most cells measured (None, "" or 0: no cap)."""

    include_compile: Any = None
    max_cells: Any = None

    def __post_init__(self) -> None:
        given = self.include_compile
        include = given if isinstance(given, str) else INCLUDE_FLAGS.get(given, given)
        if include not in COMBINATIONS_INCLUDE:
            raise ValidationError(
                f"include_compile must be one of {', '.join(COMBINATIONS_INCLUDE)}, not {include!r}."
            )
        cells = self.max_cells
        cap = None if cells in (None, "", 0) else checks.whole("max_cells", cells, 1, MAX_COMBINATIONS_CELLS)
        object.__setattr__(self, "include_compile", include)
        object.__setattr__(self, "max_cells", cap)
