"""`Studio.profile`: one denoising step of a request under torch.profiler, logged as a run.

A mixin of `studio.engine.Studio`, which keeps the engine's module short: the request is checked
(`studio.request.profile_request`), logged as `running`, its step 2 profiled on the pipeline the manager
prepares for it (`studio.measure.step_profile`; on ZeroGPU inside the GPU allocation), and the run finished
`ok` with the profile's JSON in its `profile` column, or `failed` with the reason.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

from studio.engine import zerogpu
from studio.measure.host import HostMonitor
from studio.measure.step_profile import ProfileResult, profile_step
from studio.request import GenerationRequest
from studio.request.profile_request import validate_profile


@dataclass
class ProfileRun:
    """A logged profile: its run id (None when the run log could not be written), figures and warnings."""

    run_id: int | None
    result: ProfileResult
    warnings: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        """The record every face returns: the run id, the profile's figures and the warnings."""
        return {"run_id": self.run_id, **self.result.as_json(), "warnings": list(self.warnings)}


class Profiling:
    """`profile()` for `Studio` (it uses the engine's `begin`, `fail`, `_log`, `runlog` and `manager`)."""

    @functools.cached_property
    def _profile_compute(self) -> Any:
        return zerogpu.gpu_wrapper(functools.partial(profile_step, self.manager), zerogpu.request_duration)

    def profile(self, request: GenerationRequest) -> ProfileRun:
        """Profile step 2 of `request` (techniques applied as for a generate) and log it as a run.

        Raises:
            ValidationError: fewer than 2 steps (nothing is logged).
            OutOfMemory, RunFailed: the run is logged as failed first.
        """
        validate_profile(request)
        pending = self.begin(request, warmup=0, rounds=1, group_id=None)
        try:
            with HostMonitor() as host:
                result = self._profile_compute(request)
        except Exception as exc:
            self.fail(pending, exc)
            raise
        warnings = pending.warnings
        if host.result.note():
            warnings.append(host.result.note())
        step = result.unprofiled_step_s or result.step_s
        figures = {
            "applied": list(result.applied),
            "step_median": step,
            "steps_per_second": 1 / step,
            "host_busy_pct": host.result.busy_pct,
            "host_steal_pct": host.result.steal_pct,
            "profile": result.as_json(),
        }
        if pending.run_id is not None:
            self._log(warnings, lambda: self.runlog.finish_run(pending.run_id, "ok", **figures))
        return ProfileRun(pending.run_id, result, warnings)
