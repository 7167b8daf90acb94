"""What the auto-tuner may try and what it must keep: the candidate techniques, the settings grid searched
for those that have settings and how candidates combine (the quality floor they must keep:
`studio.request.quality_floor`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from studio import devices
from studio.errors import StudioError, ValidationError
from studio.optimizations import REGISTRY, check_conflicts, unavailable_reason
from studio.request import GenerationRequest
from studio.request.generation import with_few_step

# Each technique declares whether the auto-tuner tries it (`Optimization.autotune`: never, for placement,
# memory-only techniques and the documentation's slow "original" attention; only when asked, for those that
# take minutes of compilation per configuration on a CPU) and the settings it searches (`Optimization.grid`).
# GRID: the searched settings of the techniques that have more than their defaults to try.
GRID: dict[str, list[dict[str, Any]]] = {
    name: points for name, opt in REGISTRY.items() if (points := opt.search_grid()) != [{}]
}


@dataclass(frozen=True)
class Candidate:
    optimizations: tuple[str, ...]
    settings: dict[str, dict[str, Any]] = field(default_factory=dict)

    def request(self, base: GenerationRequest) -> GenerationRequest:
        """`base` with the candidate's techniques and settings (few_step's steps, guidance and adapter)."""
        return with_few_step(
            dataclasses.replace(
                base,
                optimizations=tuple(sorted(self.optimizations, key=lambda o: (REGISTRY[o].order, o))),
                settings=self.settings,
            )
        )

    def plus(self, other: Candidate) -> Candidate:
        return Candidate(
            tuple(sorted({*self.optimizations, *other.optimizations})), {**self.settings, **other.settings}
        )


def grid(name: str, request: GenerationRequest) -> list[dict[str, Any]]:
    """The settings searched for technique `name` on `request`'s device: the points of its grid that can run
    there (a technique whose settings pick hardware says which: `Optimization.settings_reason`)."""
    opt = REGISTRY[name]
    return [
        p for p in opt.search_grid() if not opt.settings_unavailable(p, request.device, request.dtype_name)
    ]


def candidates(request: GenerationRequest, include_compile: bool = False) -> list[str]:
    """Techniques worth trying for `request` on its device: available here and able to make it faster."""
    hw = devices.detect()
    return sorted(
        name
        for name, opt in REGISTRY.items()
        if opt.autotune != "excluded"
        and (include_compile or opt.autotune != "slow_to_prepare")
        and unavailable_reason(opt, hw, request.device, request.spec.family) is None
        and _asks_for_what_is_here(name, request)
    )


def _asks_for_what_is_here(name: str, request: GenerationRequest) -> bool:
    """Whether a request with `name` can be made for this model (few_step's adapter registered, at hand)."""
    try:
        Candidate((name,)).request(request)
    except StudioError:
        return False
    return True


def check_pool(request: GenerationRequest, techniques: list[str] | None, include_compile: bool) -> list[str]:
    pool = sorted(set(techniques)) if techniques else candidates(request, include_compile)
    hw = devices.detect()
    for name in pool:
        if name not in REGISTRY:
            raise ValidationError(f"Unknown technique {name!r} for the auto-tuner.")
        reason = unavailable_reason(REGISTRY[name], hw, request.device, request.spec.family)
        if reason:
            raise ValidationError(f"{reason} Leave it out of the auto-tuner's techniques.")
    return pool


def combinable(c: Candidate) -> bool:
    try:
        check_conflicts(set(c.optimizations))
    except StudioError:
        return False
    return True
