"""Questions about what was logged or stored: History's filters, run ids, the name of a shard folder."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from studio import checks
from studio.errors import ValidationError
from studio.optimizations import REGISTRY

RUN_STATUSES = ("running", "ok", "failed", "cancelled", "interrupted")
MAX_HISTORY = 5000


def _when(name: str, value: Any) -> str | None:
    if value in (None, ""):
        return None
    try:
        moment = dt.datetime.fromisoformat(str(value).strip())
    except ValueError:
        raise ValidationError(
            f"{name} must be a date or time such as 2026-11-01 or 2026-11-01T14:30, not {value!r}."
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    return moment.astimezone(dt.UTC).isoformat(timespec="milliseconds")


@dataclass(frozen=True, kw_only=True)
class HistoryFilter:
    """A History query, checked as it is built (by name): every field parsed, so that a typo is refused
    instead of matching nothing; times in UTC unless they say otherwise; an empty field filters nothing."""

    model: str | None = None
    device: str | None = None
    status: str | None = None
    technique: str | None = None
    since: str | None = None
    until: str | None = None
    limit: int = 200

    def __post_init__(self) -> None:
        status, technique = self.status or None, self.technique or None
        if status is not None and status not in RUN_STATUSES:
            raise ValidationError(f"status must be one of {', '.join(RUN_STATUSES)}, not {status!r}.")
        if technique is not None and technique not in REGISTRY:
            raise ValidationError(f"Unknown technique {technique!r} in the filter.")
        checked = {
            "model": checks.text("model", self.model, 200) or None,
            "device": checks.text("device", self.device, 200) or None,
            "status": status,
            "technique": technique,
            "since": _when("since", self.since),
            "until": _when("until", self.until),
            "limit": checks.whole("limit", 200 if self.limit in (None, "") else self.limit, 1, MAX_HISTORY),
        }
        for name, value in checked.items():
            object.__setattr__(self, name, value)

    @classmethod
    def of(cls, values: Mapping[str, Any]) -> HistoryFilter:
        """The filter from whatever a face holds (a handler's arguments, argparse's namespace as a dict):
        the filter's fields are taken by name, the rest is left."""
        return cls(**{f.name: values[f.name] for f in fields(cls) if f.name in values})


def validate_run_id(value: Any) -> int:
    """A run id from a form or a client."""
    return checks.whole("run id", value, 1, 2**63 - 1)


SHARD_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def validate_shard_target(model: Any, name: Any) -> tuple[str, str]:
    """The model to shard and the folder name under the studio's home (a name only: a public studio never
    writes where a visitor points it)."""
    if not isinstance(name, str) or not SHARD_NAME.fullmatch(name):
        raise ValidationError(
            "The shard folder name must be 1-64 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit."
        )
    if not isinstance(model, str) or not model.strip():
        raise ValidationError("Name the model to shard (a registry id, hub id or local directory).")
    return model.strip(), name
