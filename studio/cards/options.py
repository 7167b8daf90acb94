"""A benchmark's options from the command line, a form or a client, checked before anything runs."""

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
        parts = ["python -m studio benchmark"]
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
    checked for its form here and for the model and device when the benchmark starts."""
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
    """Check a benchmark's options (numbers may arrive as text); the budget is bounded like any request's
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
