"""How long runs and images are kept: a public studio's storage is bounded, oldest first.

Two settings: `STUDIO_KEEP_DAYS` (runs and their images older than this many days are deleted) and
`STUDIO_KEEP_MB` (the images folder's size; past it, the oldest runs' images go, and their runs with them).
On a Space (`SPACE_ID` set) they default to 30 days and 2,000 MB; elsewhere nothing is deleted unless set.
The policy is said in words (`Retention.words`: System and History show it), so a visitor's runs are never
removed without the studio saying so. `prune` applies it, at most once a minute, after a run is logged.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from studio import checks

log = logging.getLogger(__name__)
SPACE_DAYS, SPACE_MB = 30, 2000
EVERY_S = 60.0
_last = {"at": 0.0}
_lock = threading.Lock()


@dataclass(frozen=True)
class Retention:
    """`days`: runs older are deleted (None: kept); `megabytes`: the images kept at most (None: all)."""

    days: int | None
    megabytes: int | None

    @property
    def words(self) -> str:
        if self.days is None and self.megabytes is None:
            return "every run and image is kept"
        parts = []
        if self.days is not None:
            parts.append(f"runs and images older than {self.days} days are deleted")
        if self.megabytes is not None:
            parts.append(f"past {self.megabytes:,} MB of images the oldest runs go with their images")
        return "; ".join(parts) + " (STUDIO_KEEP_DAYS, STUDIO_KEEP_MB)"


def policy() -> Retention:
    """The retention in force (`STUDIO_KEEP_DAYS`, `STUDIO_KEEP_MB`; `0` or `off`: no bound)."""
    space = bool(os.environ.get("SPACE_ID"))

    def setting(name: str, space_default: int) -> int | None:
        raw = os.environ.get(name, "").strip().lower()
        if raw in ("0", "off", "none"):
            return None
        if not raw:
            return space_default if space else None
        return checks.whole(name, raw, 1, 10**7)

    days, megabytes = setting("STUDIO_KEEP_DAYS", SPACE_DAYS), setting("STUDIO_KEEP_MB", SPACE_MB)
    return Retention(days=days, megabytes=megabytes)


def _images(outputs: Path) -> list[tuple[int, Path, int]]:
    """The stored images as (run id, path, bytes), oldest run first."""
    found = []
    for path in outputs.glob("run-*-*.png"):
        try:
            found.append((int(path.name.split("-")[1]), path, path.stat().st_size))
        except (ValueError, OSError):
            continue
    return sorted(found)


def prune(runlog, outputs: Path, retention: Retention | None = None, *, force: bool = False) -> int:
    """Apply the retention to the run log and the images folder; how many runs were deleted. At most once a
    minute unless `force`."""
    retention = retention or policy()
    if retention.days is None and retention.megabytes is None:
        return 0
    with _lock:
        if not force and time.monotonic() - _last["at"] < EVERY_S:
            return 0
        _last["at"] = time.monotonic()
    doomed: set[int] = set()
    if retention.days is not None:
        cutoff = (dt.datetime.now(dt.UTC) - dt.timedelta(days=retention.days)).isoformat()
        doomed |= {row["id"] for row in runlog.runs(until=cutoff, limit=-1)}
    images = _images(outputs)
    if retention.megabytes is not None:
        total, budget = sum(size for _, _, size in images), retention.megabytes * 2**20
        for run_id, _, _ in images:
            if total <= budget:
                break
            if run_id not in doomed:
                doomed.add(run_id)
                total -= sum(s for r, _, s in images if r == run_id)
    if not doomed:
        return 0
    runlog.delete_runs(ids=sorted(doomed))
    for run_id, path, _ in images:
        if run_id in doomed:
            path.unlink(missing_ok=True)
    log.info("deleted %d run(s) and their images: %s", len(doomed), retention.words)
    return len(doomed)
