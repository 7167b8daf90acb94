"""What a visitor may read and take of the run log: the runs a History filter matches, one logged run, a
consistent copy of the database, their history as one zip, and its deletion.

On a public studio each of these is the current visitor's alone (`studio.visitors.scope`); locally, and for
the owners, the whole run log. `Studio`'s methods of the same names call these.
"""

from __future__ import annotations

import dataclasses
import tempfile
import zipfile
from pathlib import Path
from typing import Any

from studio import settings, visitors
from studio.errors import ValidationError
from studio.request import HistoryFilter
from studio.runlog import RunLog


def history(runlog: RunLog, query: HistoryFilter) -> list[dict[str, Any]]:
    """Logged runs matching a checked History filter (`studio.request.HistoryFilter`), newest first."""
    return runlog.runs(**dataclasses.asdict(query), visitor=visitors.scope())


def logged_run(runlog: RunLog, run_id: int) -> dict[str, Any]:
    """One logged run's columns (a `ValidationError` names a run that is not there, or, on a public studio,
    not the current visitor's: the same sentence, so that no visitor learns which runs exist)."""
    row = runlog.get_run(run_id)
    scope = visitors.scope()
    if scope is not None and row.get("visitor") != scope:
        raise ValidationError(f"There is no run {run_id} in the run log.")
    return row


def backup(runlog: RunLog, destination: str | Path) -> Path:
    """A consistent copy of the run log at `destination` (SQLite's backup API: safe while runs write)."""
    return runlog.backup(destination, visitor=visitors.scope())


def my_history(runlog: RunLog, outputs: Path, destination: str | Path) -> Path:
    """The current visitor's runs and images as one zip at `destination`: `runs.db` (their runs alone) and
    `images/` (every image of theirs still stored under `outputs`)."""
    target = Path(destination)
    with tempfile.TemporaryDirectory(prefix="studio-history-") as scratch:
        database = backup(runlog, Path(scratch) / "runs.db")
        with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
            archive.write(database, "runs.db")
            for image in _images_of(runlog.runs(visitor=visitors.scope(), limit=-1), outputs):
                archive.write(image, f"images/{image.name}")
    return target


def forget_my_history(runlog: RunLog, outputs: Path) -> int:
    """Delete the current visitor's runs and their images (a public studio's visitor; the local user and the
    owners have no history of their own to delete: refused with a sentence). How many runs went."""
    visitor = visitors.current()
    if visitor.id is None:
        raise ValidationError(
            "Deleting a history is for a visitor of a public studio; locally, delete runs.db under "
            f"{settings.home()} to start afresh."
        )
    deleted = runlog.delete_runs(visitor=visitor.id)
    for image in _images_of(deleted, outputs):
        image.unlink(missing_ok=True)
    return len(deleted)


def _images_of(runs: list[dict[str, Any]], outputs: Path) -> list[Path]:
    """The stored images of `runs` (every image of a batch: run-<id>-<n>.png under `outputs`)."""
    return sorted(p for r in runs for p in outputs.glob(f"run-{r['id']:06d}-*.png"))
