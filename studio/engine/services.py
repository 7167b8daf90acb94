"""What the faces ask of the studio besides runs, through the same door (`Studio`): its history, one logged
run, a consistent copy of its database, a memory estimate and the first call's cost before a run, the facts
System shows, and a sharded copy of a model.

A mixin of `studio.engine.Studio`; it needs the studio's `runlog` and `manager`.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipelines.sources import allow_written
from studio import devices, settings
from studio.engine import first_call, memory_estimate
from studio.engine.shard import shard_model
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
        """Logged runs matching a checked History filter (`studio.request.HistoryFilter`), newest first."""
        return self.runlog.runs(**dataclasses.asdict(query))

    def logged_run(self, run_id: int) -> dict[str, Any]:
        """One logged run's columns (a `ValidationError` names a run that is not there)."""
        return self.runlog.get_run(run_id)

    def backup(self, destination: str | Path) -> Path:
        """A consistent copy of the run log at `destination` (SQLite's backup API: safe while runs write)."""
        return self.runlog.backup(destination)

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
            "kept_builds": {"configurations": self.manager.kept_builds(), "per_pipeline": kept.capacity()},
            "database": str(self.runlog.path),
        }

    def shard(self, model: str, name: str, max_shard_size: int | str) -> dict[str, Any]:
        """`model` saved as sharded safetensors under the studio's home (`sharded/<name>`), a folder the
        studio then loads whatever `STUDIO_MODEL_ROOTS` says (a request's `model`: the report's `out`)."""
        folder = settings.home() / "sharded"
        allow_written(folder)
        return shard_model(model, folder / name, max_shard_size)
