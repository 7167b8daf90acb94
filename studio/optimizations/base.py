"""The optimization record, the context it is applied in, and the one registry.

Every technique is one `Optimization`. Its `stage` says how the manager treats it:

- "load": part of how weights are loaded (dtype, device map); selects the cached pipeline.
- "pipeline": applied to and reverted from the live pipeline (`apply` / `revert`).
- "call": a context manager around the pipeline call (autocast, backend flags), and/or a
  step hook (`step_end`) the pipeline's step callback runs after each denoising step.

UI checkboxes, CLI flags, database columns and docs are generated from `REGISTRY`, and so are the tables of
the layers above (the auto-tuner's candidates and grids, Compare's presets, the speed ladder, the memory
estimate's effects) from each technique's facts (`studio.optimizations.facts`).
"""

from __future__ import annotations

import contextlib
import importlib.util
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, fields
from typing import Any, Literal

import torch

from studio.devices import Hardware
from studio.errors import ConflictError, ValidationError
from studio.optimizations.denoiser import kind
from studio.optimizations.facts import (
    FACTS,
    NEUTRAL,
    UNDECLARED,
    Autotune,
    Grid,
    LadderRung,
    MemoryEffect,
    Preset,
    points,
)
from studio.settings import on_zerogpu

Group = Literal["speed", "memory", "precision"]
# Why a technique that builds its graph in the process cannot run where each request's process is new
# (ZeroGPU): the words after its name, before the requirement's own reason.
JUST_IN_TIME = (
    "builds its graph just in time and cannot keep it; use aot_package (compiled once, loaded by every "
    "request)"
)
Stage = Literal["load", "pipeline", "call"]


@dataclass
class Context:
    """What an optimization sees when it is applied, reverted or wrapped around a call.

    `state` belongs to the live pipeline and survives between requests, so that
    `revert` finds exactly what `apply` saved.
    """

    device: str
    hw: Hardware
    family: str = "sd"
    model: str = ""  # the request's model, as the request names it (kept with what a technique compiles)
    target: frozenset[str] = frozenset()
    technique_settings: dict[str, dict[str, Any]] = field(default_factory=dict)
    calibration_prompts: tuple[str, ...] = ()
    state: dict[str, Any] = field(default_factory=dict)
    stats: dict[str, Any] = field(default_factory=dict)
    adapters: tuple = ()  # the LoRAs the pipeline carries (`adapters.keys`): what the techniques build over

    @property
    def device_type(self) -> str:
        return self.device.split(":")[0]

    def settings(self, name: str) -> Settings:
        """Technique `name`'s settings for this request (its defaults where none were given)."""
        return get(name).settings(**self.technique_settings.get(name, {}))


def _noop(pipe: Any, ctx: Context) -> None:
    return None


@dataclass(frozen=True)
class Settings:
    """A technique's settings: a frozen dataclass with defaults whose `__post_init__` checks and normalises
    each field (raising the user-facing sentence). Subclasses declare the fields; techniques without any use
    this."""

    def _set(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        return {f.name: f.default for f in fields(cls)}

    @classmethod
    def build(cls, technique: str, given: Any) -> Settings:
        """The settings from a mapping of loose values (JSON, form text, argv)."""
        allowed = cls.defaults()
        if not isinstance(given, dict) or not set(given) <= set(allowed):
            names = ", ".join(allowed) or "none"
            raise ValidationError(f"{technique} settings must be a mapping with keys from: {names}.")
        return cls(**given)

    @classmethod
    def checked(cls, technique: str, given: Any) -> dict[str, Any]:
        """The given settings, checked and normalised (only the keys given: the rest keep their defaults)."""
        built = cls.build(technique, given)
        return {key: getattr(built, key) for key in given}


@dataclass(frozen=True)
class Optimization:
    """One technique. Names are public: CLI flags, API values and database fields use them."""

    name: str
    label: str
    group: Group
    description: str
    stage: Stage = "pipeline"
    requires: tuple[str, ...] = ()
    conflicts: tuple[str, ...] = ()
    # Why it cannot run with what `conflicts` names (a clause a sentence carries after a colon), and, by name,
    # where one of them has a reason of its own (`conflict_reason_of`).
    conflict_reason: str = ""
    conflict_reasons: dict[str, str] = field(default_factory=dict)
    reversible: bool = True
    order: int = 50
    apply: Callable[[Any, Context], None] = _noop
    revert: Callable[[Any, Context], None] = _noop
    call_context: Callable[[Context], contextlib.AbstractContextManager] | None = None
    step_end: Callable[[Any, int, Context, dict], dict] | None = None
    step_tensors: tuple[str, ...] = ()
    dtype: torch.dtype | None = None
    places_modules: bool = False
    # Further copies of the pipeline's weights the technique holds while applied (a runtime's own converted
    # model): what a sweep must count to keep a copy of the pipeline for it; a function of the technique's
    # settings where they change it (`copies`).
    weight_copies: float | Callable[[Settings], float] = 0.0
    # Whether `apply` only reads the loaded weights (converts them into a runtime of its own, wraps or swaps
    # modules) and never writes a tensor: then a sweep's live pipeline for it shares the cached weights and
    # copies only the modules around them, and counts only `weight_copies`.
    shares_weights: bool = False
    settings: type[Settings] = Settings
    # Why a requirement matters to this technique, by its kind ("family", "accelerator", ...), as words after
    # its name ("has no convolutions to speed up in a transformer"); the requirement's own reason follows.
    reasons: dict[str, str] = field(default_factory=dict)
    # Why these settings cannot run on this device here (settings, device, dtype name) -> a sentence or None,
    # for techniques whose settings pick hardware (an attention backend); checked with the request.
    settings_reason: Callable[[Settings, str, str], str | None] | None = None
    # Its facts (`studio.optimizations.facts`): every registered technique declares each one.
    autotune: Autotune = UNDECLARED
    grid: Grid = UNDECLARED
    presets: tuple[Preset, ...] = UNDECLARED
    ladder_rung: LadderRung | None = UNDECLARED
    memory_effect: MemoryEffect = UNDECLARED
    # The facts it left undeclared, each taken as its neutral value (`facts.NEUTRAL`); `register` refuses it.
    undeclared: frozenset[str] = field(init=False, default=frozenset(), repr=False, compare=False)

    def __post_init__(self) -> None:
        missing = frozenset(name for name in FACTS if getattr(self, name) is UNDECLARED)
        for name in missing:
            object.__setattr__(self, name, NEUTRAL[name])
        object.__setattr__(self, "undeclared", missing)

    @property
    def defaults(self) -> dict[str, Any]:
        """The settings' names and defaults (for docs, the UI's placeholder and the CLI)."""
        return self.settings.defaults()

    def copies(self, given: dict[str, Any]) -> float:
        """`weight_copies` with settings `given` (a request's, for this technique)."""
        if callable(self.weight_copies):
            return self.weight_copies(self.settings(**given))
        return self.weight_copies

    def search_grid(self) -> list[dict[str, Any]]:
        """The settings the auto-tuner searches for it, in order (`grid`, computed now where a function)."""
        return points(self.grid)

    def settings_unavailable(self, given: dict[str, Any], device: str, dtype: str) -> str | None:
        """Why settings `given` cannot run on `device` in `dtype` here (`settings_reason`), or None."""
        if self.settings_reason is None:
            return None
        return self.settings_reason(self.settings(**given), device, dtype)


REGISTRY: dict[str, Optimization] = {}


def register(opt: Optimization) -> Optimization:
    """Add a technique to the registry; names must be unique."""
    if opt.name in REGISTRY:
        raise ValueError(f"optimization {opt.name!r} is registered twice")
    if opt.undeclared:
        missing = ", ".join(name for name in FACTS if name in opt.undeclared)
        raise ValueError(
            f"optimization {opt.name!r} does not declare {missing}: every technique declares each of its "
            "facts (studio/optimizations/facts.py), even as none."
        )
    REGISTRY[opt.name] = opt
    return opt


def get(name: str) -> Optimization:
    """Look a technique up by name, with the list of valid names in the error."""
    try:
        return REGISTRY[name]
    except KeyError:
        raise ValidationError(
            f"Unknown optimization {name!r}. Valid names: {', '.join(sorted(REGISTRY))}."
        ) from None


def ordered(names: frozenset[str] | set[str] | list[str]) -> list[Optimization]:
    """The techniques in the order they must be applied (reverse it to revert)."""
    return sorted((get(n) for n in set(names)), key=lambda o: (o.order, o.name))


def _module_available(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


def _families(req: str) -> list[str]:
    """The families a 'family:sd|sdxl' requirement allows."""
    return req.removeprefix("family:").split("|")


def _requirement_reason(req: str, hw: Hardware, device: str, family: str | None) -> str | None:
    """Why `req` is not met for a run on `device`, or None when it is met."""
    dtype = device.split(":")[0]
    if req == "cuda":
        if not hw.cuda_functional:
            return f"needs CUDA; {hw.cuda_reason}"
        return None if dtype == "cuda" else f"needs a CUDA device; this run is on {device}"
    if req == "accelerator":
        return None if dtype in ("cuda", "mps") else f"needs a GPU; this run is on {device}"
    if req == "ampere":
        gpu = _gpu_for(hw, device)
        if gpu is None or gpu.capability < (8, 0):
            return "needs an NVIDIA GPU of compute capability 8.0 (Ampere) or newer"
        return None
    if req == "fp8":
        gpu = _gpu_for(hw, device)
        if gpu is None or gpu.capability < (8, 9):
            where = (
                f"this run is on {device}" if gpu is None else "{}: {}.{}".format(gpu.name, *gpu.capability)
            )
            return f"needs fp8 tensor cores (an NVIDIA GPU of compute capability 8.9 or newer); {where}"
        return None
    if req.startswith("gpus>="):
        want = int(req.removeprefix("gpus>="))
        have = len(hw.gpus) if hw.cuda_functional else 0
        return None if have >= want else f"needs at least {want} CUDA GPUs; {have} functional here"
    if req == "kept-across-requests":
        if on_zerogpu():
            return "on ZeroGPU each request runs in a new GPU worker, which keeps nothing for the next one"
        return None
    if req == "cpu":
        return None if dtype == "cpu" else f"runs on the CPU; this run is on {device}"
    if req == "cpu-x86":
        if dtype != "cpu":
            return f"runs on the CPU (oneDNN int8 kernels); this run is on {device}"
        return None if {"avx2", "avx512f"} & hw.cpu_flags else "needs an x86 CPU with AVX2 or AVX-512"
    if req.startswith("module:"):
        mod = req.removeprefix("module:")
        return None if _module_available(mod) else f"needs the {mod} package, which is not installed"
    if req.startswith("family:"):
        allowed = _families(req)
        if family is None or family in allowed:
            return None
        return f"works on {'/'.join(allowed)} {kind(allowed)}, not on a {family} pipeline"
    raise ValueError(f"unknown requirement {req!r}")


def _gpu_for(hw: Hardware, device: str):
    if not device.startswith("cuda") or not hw.cuda_functional:
        return None
    index = int(device.split(":")[1]) if ":" in device else 0
    return next((g for g in hw.gpus if g.index == index), None)


def unavailable_reason(opt: Optimization, hw: Hardware, device: str, family: str | None = "sd") -> str | None:
    """One sentence saying why `opt` cannot run on `device` here for a model of `family` (None: for some
    model, leaving its `family:` requirements out), or None if it can."""
    for req in opt.requires:
        reason = _requirement_reason(req, hw, device, family)
        note = opt.reasons.get(req.partition(":")[0])
        if reason:
            return f"{opt.name} {note} ({reason})." if note else f"{opt.name} {reason}."
    return None


def works_on(opt: Optimization) -> str | None:
    """The families `opt` is limited to, in words ('sd/sdxl UNets'), or None when it runs on any."""
    allowed = next((_families(req) for req in opt.requires if req.startswith("family:")), None)
    return f"{'/'.join(allowed)} {kind(allowed)}" if allowed else None


def conflicts_of(name: str) -> set[str]:
    """What `name` cannot be combined with: its own declaration and every entry naming it."""
    return set(get(name).conflicts) | {o.name for o in REGISTRY.values() if name in o.conflicts}


def conflict_reason_of(name: str, other: str) -> str:
    """Why `name` and `other` cannot be combined, as the technique declaring the conflict says it."""
    for declares, named in ((name, other), (other, name)):
        if named in (opt := get(declares)).conflicts:
            why = opt.conflict_reasons.get(named) or opt.conflict_reason
            return f"{declares} {why[3:]}" if why.startswith("it ") else why  # "it" named: two are in play
    return ""


def check_conflicts(names: set[str] | frozenset[str]) -> None:
    """Raise ConflictError naming the first conflicting pair in `names`, with the registry's reason."""
    for name in sorted(names):
        for other in sorted(conflicts_of(name)):
            if other in names:
                why = f": {conflict_reason_of(name, other)}" if conflict_reason_of(name, other) else ""
                raise ConflictError(f"{name} and {other} cannot be combined{why}; remove one of them.")


@contextlib.contextmanager
def call_contexts(optimizations: list[Optimization], ctx: Context) -> Iterator[None]:
    """Enter the call-stage contexts of `optimizations` around a pipeline call."""
    with contextlib.ExitStack() as stack:
        for opt in optimizations:
            if opt.call_context is not None:
                stack.enter_context(opt.call_context(ctx))
        yield
