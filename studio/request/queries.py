"""Questions about what was logged or stored: History's filters, run ids, the name of a shard folder."""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from typing import Any

from studio import checks
from studio.errors import ValidationError
from studio.optimizations import REGISTRY


@dataclass(frozen=True)
class HistoryFilter:
    """A checked History query: every field parsed, so that a typo is refused instead of matching nothing."""

    model: str | None = None
    device: str | None = None
    status: str | None = None
    technique: str | None = None
    since: str | None = None
    until: str | None = None
    limit: int = 200


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


def validate_history(
    model: Any = None,
    device: Any = None,
    status: Any = None,
    technique: Any = None,
    since: Any = None,
    until: Any = None,
    limit: Any = 200,
) -> HistoryFilter:
    """Check History's filters (times in UTC unless they say otherwise)."""
    if status not in (None, "") and status not in RUN_STATUSES:
        raise ValidationError(f"status must be one of {', '.join(RUN_STATUSES)}, not {status!r}.")
    if technique not in (None, "") and technique not in REGISTRY:
        raise ValidationError(f"Unknown technique {technique!r} in the filter.")
    texts = {}
    for name, value in (("model", model), ("device", device)):
        texts[name] = checks.text(name, value, 200) or None
    return HistoryFilter(
        model=texts["model"],
        device=texts["device"],
        status=status or None,
        technique=technique or None,
        since=_when("since", since),
        until=_when("until", until),
        limit=checks.whole("limit", limit, 1, MAX_HISTORY),
    )


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
