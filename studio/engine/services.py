"""What the faces ask of the studio besides runs, through the same door (`Studio`): its history, one logged
run, a consistent copy of its database, a memory estimate and the first call's cost before a run, the facts
System shows, and a sharded copy of a model.

A mixin of `studio.engine.Studio`; it needs the studio's `runlog` and `manager`.
"""

from __future__ import annotations

import dataclasses
import tempfile
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipelines.sources import allow_written
from studio import devices, settings, visitors
from studio.engine import first_call, memory_estimate, retention
from studio.engine.shard import shard_model
from studio.errors import ValidationError
from studio.optimizations import availability, kept
from studio.request import GenerationRequest, HistoryFilter

if TYPE_CHECKING:
    from studio.manager import PipelineManager
    from studio.runlog import RunLog


class Services:
    """History, estimates, the database copy and sharding, for every face alike."""

    runlog: RunLog
    manager: PipelineManager

    def history(self, query: HistoryFilter) -> list[dict[str, Any]]:
        """Logged runs matching a checked History filter (`studio.request.HistoryFilter`), newest first: the
        current visitor's alone on a public studio (`studio.visitors`)."""
        return self.runlog.runs(**dataclasses.asdict(query), visitor=visitors.scope())

    def logged_run(self, run_id: int) -> dict[str, Any]:
        """One logged run's columns (a `ValidationError` names a run that is not there, or, on a public
        studio, not the current visitor's: the same sentence, so that no visitor learns which runs exist)."""
        row = self.runlog.get_run(run_id)
        scope = visitors.scope()
        if scope is not None and row.get("visitor") != scope:
            raise ValidationError(f"There is no run {run_id} in the run log.")
        return row

    def backup(self, destination: str | Path) -> Path:
        """A consistent copy of the run log at `destination` (SQLite's backup API: safe while runs write): of
        the current visitor's runs alone on a public studio."""
        return self.runlog.backup(destination, visitor=visitors.scope())

    def retention_words(self) -> str:
        """How long runs and images are kept here, in words (`studio.engine.retention`)."""
        return retention.policy().words

    def my_history(self, destination: str | Path) -> Path:
        """The current visitor's runs and images as one zip at `destination`: `runs.db` (their runs alone) and
        `images/` (every image of theirs still stored)."""
        target = Path(destination)
        with tempfile.TemporaryDirectory(prefix="studio-history-") as scratch:
            database = self.backup(Path(scratch) / "runs.db")
            with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
                archive.write(database, "runs.db")
                for image in self._images_of(self.runlog.runs(visitor=visitors.scope(), limit=-1)):
                    archive.write(image, f"images/{image.name}")
        return target

    def forget_my_history(self) -> int:
        """Delete the current visitor's runs and their images (a public studio's visitor; the local user and
        the owners have no history of their own to delete: refused with a sentence). How many runs went."""
        visitor = visitors.current()
        if visitor.id is None:
            raise ValidationError(
                "Deleting a history is for a visitor of a public studio; locally, delete runs.db under "
                f"{settings.home()} to start afresh."
            )
        deleted = self.runlog.delete_runs(visitor=visitor.id)
        for image in self._images_of(deleted):
            image.unlink(missing_ok=True)
        return len(deleted)

    def _images_of(self, runs: list[dict[str, Any]]) -> list[Path]:
        """The stored images of `runs` (every image of a batch: run-<id>-<n>.png under the outputs folder)."""
        outputs = getattr(self, "outputs", None)
        if outputs is None:
            return []
        return sorted(p for r in runs for p in Path(outputs).glob(f"run-{r['id']:06d}-*.png"))

    def estimate(self, request: GenerationRequest) -> memory_estimate.Estimate:
        """The peak memory `request` should reach, before it runs, and whether it fits."""
        return memory_estimate.estimate(self.manager, request, self.runlog)

    def will_it_fit(self, request: GenerationRequest) -> dict[str, Any]:
        """The estimate as every face answers it: where it would not fit, its sentence names the memory
        techniques that would bring it under (what a run of it would be refused with)."""
        return memory_estimate.answer(self.manager, request, self.runlog)

    def first_call(self, request: GenerationRequest) -> first_call.FirstCall | None:
        """What the first call of `request`'s configuration cost here before (`studio.engine.first_call`)."""
        return first_call.logged(self.runlog, request)

    def system_facts(self) -> dict[str, Any]:
        """Devices, capabilities, versions, techniques, loaded pipelines and the run log (System's view)."""
        return {
            "hardware": devices.detect().summary(),
            "versions": settings.versions(),
            "techniques": availability(),
            "loaded_pipelines": [list(map(str, k)) for k in self.manager.loaded()],
            "kept_builds": {"configurations": kept.configurations_kept(), "per_pipeline": kept.capacity()},
            "retention": retention.policy().words,
            "database": str(self.runlog.path),
        }

    def shard(self, model: str, name: str, max_shard_size: int | str) -> dict[str, Any]:
        """`model` saved as sharded safetensors under the studio's home (`sharded/<name>`), a folder the
        studio then loads whatever `STUDIO_MODEL_ROOTS` says (a request's `model`: the report's `out`)."""
        folder = settings.home() / "sharded"
        allow_written(folder)
        return shard_model(model, folder / name, max_shard_size)
