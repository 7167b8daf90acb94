"""A card run's options from the command line, a form or a client, checked before anything runs."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from studio import checks
from studio.errors import ValidationError

DEFAULT_ROUNDS = 3
DEFAULT_BUDGET_S = 900.0  # the auto-tuner's time per model
MIN_BUDGET_S = 10.0


@dataclass(frozen=True)
class Options:
    """What to measure: the suite's models (None: all), the auto-tuner's budget per model, configurations
    to measure instead of searching (None: search), interleaved rounds and warm-up calls, the device."""

    models: tuple[str, ...] | None = None
    budget_s: float = DEFAULT_BUDGET_S
    configs: tuple[str, ...] | None = None
    rounds: int = DEFAULT_ROUNDS
    warmup: int = 1
    device: str = "auto"

    def as_json(self) -> dict[str, Any]:
        return {
            "models": list(self.models) if self.models else None,
            "budget_s": self.budget_s,
            "configs": list(self.configs) if self.configs else None,
            "rounds": self.rounds,
            "warmup": self.warmup,
            "device": self.device,
        }

    def command(self) -> str:
        """The command line that measures the same again."""
        parts = ["python -m studio cards"]
        if self.models:
            parts.append("--models " + " ".join(self.models))
        if self.configs:
            parts.append(
                "--configs " + " ".join(f'"{c}"' if re.search(r"[\s\[\]]", c) else c for c in self.configs)
            )
        else:
            parts.append(f"--budget-s {self.budget_s:g}")
        parts.append(f"--rounds {self.rounds}")
        if self.warmup != 1:
            parts.append(f"--warmup {self.warmup}")
        if self.device != "auto":
            parts.append(f"--device {self.device}")
        return " ".join(parts)


def _names(value: Any, what: str) -> tuple[str, ...] | None:
    """A list of names, or one string of names separated by commas or spaces; None or empty: none given."""
    if value in (None, "", [], ()):
        return None
    if isinstance(value, str):
        value = re.split(r"[,\s]+", value.strip())
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise ValidationError(f"{what} must be a list of names, not {value!r}.")
    return tuple(dict.fromkeys(v.strip() for v in value if v.strip())) or None


def _configs(value: Any) -> tuple[str, ...] | None:
    """Configurations as Compare writes them ('openvino[mode=full_int8]', 'bf16+channels_last'), each one
    checked for its form here and for the model and device when the run starts."""
    from studio.request.configs import parse_config

    if value in (None, "", [], ()):
        return None
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise ValidationError(f"configurations must be a list of texts such as 'openvino', not {value!r}.")
    for config in value:
        parse_config(config)
    return tuple(dict.fromkeys(c.strip() for c in value if c.strip())) or None


def validate_options(
    models: Any = None,
    budget_s: Any = DEFAULT_BUDGET_S,
    configs: Any = None,
    rounds: Any = DEFAULT_ROUNDS,
    warmup: Any = 1,
    device: Any = "auto",
) -> Options:
    """Check a card run's options (numbers may arrive as text); the budget is bounded like any request's
    work (`STUDIO_MAX_REQUEST_S`), the counts like a sweep's."""
    from studio.request.sweep_limits import max_request_seconds, validate_counts

    counts = validate_counts(warmup, rounds)
    if not isinstance(device, str) or not device.strip():
        raise ValidationError("device must be text such as 'auto', 'cpu' or 'cuda:0'.")
    return Options(
        models=_names(models, "models"),
        budget_s=checks.number("The auto-tuner's budget (s)", budget_s, MIN_BUDGET_S, max_request_seconds()),
        configs=_configs(configs),
        rounds=counts.rounds,
        warmup=counts.warmup,
        device=device.strip(),
    )


@dataclass(frozen=True)
class Expected:
    """What a card run is expected to take before it starts, per model and in all, and the words for it."""

    seconds: float
    words: str
    searches: bool  # whether the auto-tuner searches (then within the budget) for some model


def _minutes(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.1f} min"


def _first_call_s(studio: Any, request: Any, config: str, cards: list[dict[str, Any]]) -> float | None:
    """A configuration's first call: as this studio logged it, else the slowest a card measured for the
    suite's model (at the suite's shape), else None (not known)."""
    from studio.cards.measured_first_calls import from_cards
    from studio.request import with_config

    logged = studio.first_call(with_config(request, config)) if studio is not None else None
    if logged is not None:
        return logged.cold_s
    found = from_cards(cards, request.model, config)
    return found[0]["seconds"] if found else None


def expected(options: Options, studio: Any = None) -> Expected:
    """The run's expected time, model by model: the first Compare's timed calls (the model's assumed seconds
    per call, `estimated_seconds`), then where the auto-tuner searches, the budget, which the fixed
    configurations' first calls (compiles, conversions) count against, and a last Compare of a few
    configurations; where nothing is searched, the first calls come on top of the calls."""
    from studio import devices
    from studio.cards.card import default_folder
    from studio.cards.collection import DOCS_CARDS, load_folder
    from studio.cards.suite import pick_cases, suite_for
    from studio.request import build_request
    from studio.request.sweep_limits import estimated_seconds

    device = devices.resolve(options.device)
    cases = pick_cases(suite_for(devices.detect(), device), list(options.models or ()) or None)
    cards = load_folder(default_folder(), DOCS_CARDS).cards
    total, parts, unknown, full, searches = 0.0, [], [], [], False
    for case in cases:
        request = build_request(**case.fields_on(device))
        configs = list(options.configs or case.keep + case.lossy_configs)
        calls = estimated_seconds(request, options.warmup + options.rounds) * (len(configs) + 2)
        firsts = {c: _first_call_s(studio, request, c, cards) for c in configs}
        unknown += [c for c, s in firsts.items() if s is None]
        first_s = sum(s or 0.0 for s in firsts.values())
        if options.configs is None and case.lossy_search:
            searches = True
            seconds = calls * 2 + max(options.budget_s, first_s)
            if first_s >= options.budget_s:
                full.append(case.model)
        else:
            seconds = calls + first_s
        total += seconds
        parts.append(f"{case.model} {_minutes(seconds)}, of it {first_s:.0f} s of first calls")
    words = f"Expected: about {_minutes(total)} in all ({'; '.join(parts)})."
    if full:
        words += (
            f" For {', '.join(full)} the first calls alone fill the budget, so nothing is left to search: "
            "give it more to search."
        )
    if unknown:
        words += f" Not known yet, so not counted: the first calls of {', '.join(sorted(set(unknown)))}."
    return Expected(round(total, 1), words, searches)
