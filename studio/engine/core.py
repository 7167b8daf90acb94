"""The engine's front door: validate -> manager -> bench -> quality -> runlog.

The UI, the API and the CLI all call `Studio`; none of them talks to the lower layers directly, so they
validate, run, measure and log the same way. This file is long because it is that one door: a run and a
profile are its own methods (logged as `running`, computed, finished or failed), and every other question a
face asks is a method here too, most of them one line calling the module that does the work (`run_history`,
`memory_estimate`, `first_call`, `speed_timeline`, `shard`, `retention`). The values a run carries and its
run-log columns are in `studio.engine.run_data`, recompile storms in `studio.recompiles`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from studio import devices, phases, report, settings
from studio.engine import (
    first_call,
    memory_advice,
    memory_estimate,
    retention,
    run_history,
    shard,
    speed_timeline,
    turns,
    zerogpu,
)
from studio.engine import threads as cpu_threads
from studio.engine.run_data import (
    Computed,
    Pending,
    ProfileRun,
    RunOptions,
    RunResult,
    profile_metrics,
    run_columns,
    run_metrics,
)
from studio.errors import Cancelled, OutOfMemory, RunLogError, StudioError
from studio.manager import PipelineManager
from studio.measure import bench, prompt_score, quality, step_profile
from studio.measure.host import HostMonitor
from studio.measure.step_profile import ProfileResult
from studio.optimizations import REGISTRY, availability, kept
from studio.optimizations.step_lever import stacked_cache_warning
from studio.recompiles import graph_builds, lora_warnings, storm_warnings
from studio.report import image_metadata
from studio.request import GenerationRequest, HistoryFilter
from studio.request.profile_request import validate_profile
from studio.runlog import RunLog

log = logging.getLogger(__name__)


def _to_pil(arrays: np.ndarray) -> list[Image.Image]:
    return [Image.fromarray((np.clip(a, 0, 1) * 255).round().astype(np.uint8)) for a in arrays]


def prompt_warnings(request: GenerationRequest) -> list[str]:
    """What the user should know about the request before looking at the image (the model's own vocabulary, a
    step cache stacked on few_step)."""
    warn = request.spec.hook("prompt_warning")
    sentence = warn(f"{request.prompt} {request.negative_prompt}") if warn else None
    return [s for s in (sentence, stacked_cache_warning(request.optimizations)) if s]


def compute_run(
    manager: PipelineManager, request: GenerationRequest, options: RunOptions = RunOptions()
) -> Computed:
    """Configure, run and measure as `options` say: compute only, no run-log or file writes; with
    `options.threads`, torch's CPU threads for the calls (`studio.engine.threads`).

    Raises:
        Cancelled: `should_stop` already says stop (a Cancel clicked while the run waited in the queue):
            nothing is loaded or computed.
    """
    should_stop, threads = options.should_stop, options.threads
    stop = should_stop() if should_stop is not None else None
    if stop:
        why = f" ({stop})" if isinstance(stop, str) else ""
        raise Cancelled(f"Cancelled after 0 of {request.steps} steps, before it started{why}.")
    started = time.time()
    with manager.acquire(request, options.slot) as prepared:
        before = graph_builds(prepared.entry.stats)
        with cpu_threads.using(threads):
            measured = bench.measure(
                prepared, request, options.warmup, options.rounds, options.on_step, should_stop=should_stop
            )
        stats = dict(prepared.entry.stats)
        stats["first_call_phases"] = phases.since(stats.pop(phases.PHASES, []), started)  # this run's only
        if threads is not None or "threads" in request.optimizations:
            stats["cpu_threads"] = threads or request.settings.get("threads", {}).get("num_threads")
            stats["thread_policy"] = cpu_threads.policy_of(request, threads)
        stats["graph_builds_this_run"] = graph_builds(stats) - before
        device_map = getattr(prepared.pipe, "hf_device_map", None)
        if device_map:  # where accelerate placed each model (device_map="balanced"), logged with the run
            stats["hf_device_map"] = {name: str(device) for name, device in device_map.items()}
        times = {"load_seconds": prepared.load_seconds, "switch_seconds": prepared.switch_seconds}
        return Computed(measured, prepared.applied, first_call=prepared.first_call, stats=stats, **times)


class Studio:
    """Runs requests and logs them, profiles one step of a request, and answers what the faces ask besides
    runs: history, estimates, the first call's cost, the speed timeline, the database copy, sharding.

    Args:
        db_path: the SQLite run log (default: `settings.db_path()`).
        outputs: where images are written (default: `settings.outputs_dir()`).
        manager: the pipeline manager (a new one by default).
    """

    def __init__(
        self,
        db_path: str | Path | None = None,
        outputs: str | Path | None = None,
        manager: PipelineManager | None = None,
    ):
        self.runlog = RunLog(db_path or settings.db_path(), techniques=tuple(REGISTRY))
        self.outputs = Path(outputs or settings.outputs_dir())
        try:
            self.outputs.mkdir(parents=True, exist_ok=True)
        except OSError as exc:  # a read-only home: runs still return their images (`_save` says why)
            log.warning(
                "the images folder %s cannot be created (%s); images will not be stored", self.outputs, exc
            )
        self.manager = manager or PipelineManager()
        self._compute = zerogpu.gpu_wrapper(self._compute_run, zerogpu.request_duration)
        self._profile_compute = zerogpu.gpu_wrapper(self._profile_step, zerogpu.request_duration)
        interrupted = self.runlog.mark_interrupted()
        if interrupted:
            log.warning("marked %d unfinished run(s) from a previous process as interrupted", interrupted)

    def _save(self, result: RunResult, columns: dict[str, Any], baseline: RunResult | None) -> list[str]:
        """Write the images as PNG, each carrying its run (`report.image_metadata`); a failed write (full
        disk, read-only) becomes a warning, the images are still returned to the caller."""
        run_id, warnings = result.run_id, result.warnings
        stem = f"run-{run_id:06d}" if run_id is not None else f"unlogged-{time.time_ns()}"
        record = report.run_record(result, baseline)
        for i, img in enumerate(result.images):  # Gradio copies an image's text into the PNG it serves
            img.info.update(image_metadata.chunks(image_metadata.embedded(columns, record, i)))
        paths = []
        try:
            for i, img in enumerate(result.images):
                path = self.outputs / f"{stem}-{i}.png"
                img.save(path, pnginfo=image_metadata.png_info(img.info))
                paths.append(str(path))
        except OSError as exc:
            log.error("could not save the images of run %s: %s", run_id, exc)
            warnings.append(
                f"The image could not be saved under {self.outputs} ({exc}); it is shown but not stored."
            )
        return paths

    def _log(self, warnings: list[str], write: Callable[[], Any]) -> Any:
        """A run-log write whose failure is reported (a warning for the caller, an error in the server log)
        instead of costing the user the image."""
        try:
            return write()
        except RunLogError as exc:
            log.error("%s", exc)
            if str(exc) not in warnings:
                warnings.append(str(exc))
            return None

    def begin(self, request: GenerationRequest, *, warmup: int, rounds: int, group_id: int | None) -> Pending:
        """Log a run as `running` before any compute (a crash leaves a trace); what to warn about it."""
        warnings = prompt_warnings(request)
        columns = run_columns(request, warmup, rounds, group_id)
        run_id = self._log(warnings, lambda: self.runlog.start_run(columns))
        return Pending(run_id, request, warnings, columns)

    def compute(self, request: GenerationRequest, options: RunOptions = RunOptions()) -> Computed:
        """Configure, run and measure one configuration (on ZeroGPU, inside the GPU allocation, its
        callbacks made to cross the fork); `options.threads` as a sweep fixed them, else chosen for this run
        (`studio.engine.threads.choose`), in the device's turn (`studio.engine.turns`)."""
        with turns.turn(request.device):
            portable = replace(
                options,
                on_step=zerogpu.portable(options.on_step, "progress"),
                should_stop=zerogpu.portable(options.should_stop, "cancel"),
                threads=cpu_threads.choose(request) if options.threads is None else options.threads,
            )
            return self._compute(request, portable)

    def fail(self, pending: Pending, exc: BaseException) -> None:
        """Log a run that did not finish (cancelled or failed), and attach its warnings to the error."""
        if isinstance(exc, OutOfMemory):
            self._advise(exc, pending.request)
        status = "cancelled" if isinstance(exc, Cancelled) else "failed"
        message = str(exc) if isinstance(exc, StudioError) else f"{type(exc).__name__}: {exc}"
        if pending.run_id is not None:
            self._log(pending.warnings, lambda: self.runlog.finish_run(pending.run_id, status, error=message))
        for warning in pending.warnings:
            exc.add_note(warning)

    def generate(
        self,
        request: GenerationRequest,
        *,
        warmup: int = 0,
        rounds: int = 1,
        group_id: int | None = None,
        baseline: RunResult | None = None,
        on_step: Callable[[int, int], None] | None = None,
        should_stop: Callable[[], bool] | None = None,
    ) -> RunResult:
        """Run one configuration under the timing protocol and log it (failed runs too).

        If the run log cannot be written (read-only database, full disk), the run still happens and
        returns its images; the failure is in `RunResult.warnings` and the server log. A run predicted not
        to fit on a GPU of known size is refused before it is logged (`memory_estimate.check_fits`).
        """
        fit = memory_estimate.check_fits(self.manager, request, self.runlog)
        pending = self.begin(request, warmup=warmup, rounds=rounds, group_id=group_id)
        try:
            with HostMonitor() as host:
                options = RunOptions(warmup=warmup, rounds=rounds, on_step=on_step, should_stop=should_stop)
                computed = self.compute(request, options)
            computed.host = host.result
            computed.stats["memory_estimate"] = fit.as_json()  # logged: later estimates learn from it
            return self.finish(pending, computed, baseline)
        except Exception as exc:
            self.fail(pending, exc)
            raise

    def _compute_run(self, request: GenerationRequest, options: RunOptions) -> Computed:
        """The compute of a run (on ZeroGPU this runs under `spaces.GPU` in a forked worker)."""
        return compute_run(self.manager, request, options)

    def profile(self, request: GenerationRequest) -> ProfileRun:
        """Profile step 2 of `request` under torch.profiler (techniques applied as for a generate) and log it
        as a run: `ok` with the profile's JSON in its `profile` column, or `failed` with the reason.

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
        figures = profile_metrics(result, host.result)
        if pending.run_id is not None:
            self._log(warnings, lambda: self.runlog.finish_run(pending.run_id, "ok", **figures))
        return ProfileRun(pending.run_id, result, warnings)

    def _profile_step(self, request: GenerationRequest) -> ProfileResult:
        """The compute of a profile (on ZeroGPU under `spaces.GPU`, as a run's)."""
        return step_profile.profile_step(self.manager, request)

    def log_computed(
        self,
        request: GenerationRequest,
        computed: Computed,
        *,
        warmup: int,
        rounds: int,
        group_id: int | None,
        baseline: RunResult | None,
        hardware: dict | None = None,
        extra: dict[str, Any] | None = None,
    ) -> RunResult:
        """Log a run computed elsewhere (another process of a distributed sweep) and save its images."""
        record = run_columns(request, warmup, rounds, group_id)
        columns = {**record, "hardware": hardware or record["hardware"]}
        warnings: list[str] = []
        run_id = self._log(warnings, lambda: self.runlog.start_run(columns))
        try:
            return self.finish(Pending(run_id, request, warnings, columns), computed, baseline, extra)
        except Exception as exc:
            if run_id is not None:
                error = f"{type(exc).__name__}: {exc}"
                self._log(warnings, lambda: self.runlog.finish_run(run_id, "failed", error=error))
            raise

    def finish(
        self,
        pending: Pending,
        computed: Computed,
        baseline: RunResult | None,
        extra: dict[str, Any] | None = None,
    ) -> RunResult:
        """Save the images, compare with the baseline, and log the run as `ok` with its figures, in the
        device's turn (the images' encoding and scores never overlap another run's timed calls).

        `extra`: figures known only to a sweep (speedup and its range, verdict), logged with the run.
        """
        with turns.turn(pending.request.device):
            return self._finish(pending, computed, baseline, extra)

    def _finish(
        self, pending: Pending, computed: Computed, baseline: RunResult | None, extra: dict[str, Any] | None
    ) -> RunResult:
        request, warnings = pending.request, pending.warnings
        measured = computed.measured
        metrics = run_metrics(request, computed, extra)
        warnings.extend(storm_warnings(computed.stats) + lora_warnings(computed.stats))
        warnings.extend(e["note"] for e in computed.stats.get("first_call_phases", ()) if e.get("note"))
        host = computed.host
        if host is not None and host.note():
            warnings.append(host.note())
        qual = self._quality(request, measured.images, baseline)
        result = RunResult(
            run_id=pending.run_id,
            request=request,
            metrics=metrics,
            images=_to_pil(measured.images),
            image_paths=[],
            arrays=measured.images,
            quality=qual,
            applied=computed.applied,
            warnings=warnings,
        )
        columns = pending.columns or run_columns(request, 0, 1, None)
        paths = result.image_paths = self._save(result, columns, baseline)
        if pending.run_id is not None:
            self._log(
                warnings,
                lambda: self.runlog.finish_run(
                    pending.run_id,
                    "ok",
                    applied=list(computed.applied),
                    image_path=paths[0] if paths else None,
                    image_paths=paths,
                    baseline_run_id=baseline.run_id if baseline else None,
                    **metrics,
                    **qual,
                ),
            )
        self._log(warnings, lambda: retention.prune(self.runlog, self.outputs))  # the oldest go, if bounded
        return result

    def _advise(self, exc: OutOfMemory, request: GenerationRequest) -> None:
        """Add to an out-of-memory error the memory techniques to retry with, ranked by the run log."""
        advice = memory_advice.advise(self.runlog, request)
        exc.advice = tuple(a.name for a in advice if a.saving is None or a.saving > 0)
        exc.args = (f"{exc} {memory_advice.retry_message(advice)}",)

    def _quality(self, request: GenerationRequest, arrays: np.ndarray, baseline: RunResult | None) -> dict:
        """The first image against the baseline's and how well it shows its prompt (after the timed calls)."""
        qual: dict[str, Any] = {}
        if baseline is not None:
            qual.update(quality.compare(arrays[0], baseline.arrays[0]))
        fidelity = request.spec.hook("prompt_fidelity")
        if fidelity is not None:
            qual["fidelity"] = quality.prompt_fidelity(arrays[0], request.prompt, fidelity)
        base = baseline.quality if baseline is not None else None
        return {**qual, **prompt_score.fields(arrays[0], request.prompt, qual.get("fidelity"), base)}

    def history(self, query: HistoryFilter) -> list[dict[str, Any]]:
        """Logged runs matching a checked History filter, newest first (`run_history.history`)."""
        return run_history.history(self.runlog, query)

    def logged_run(self, run_id: int) -> dict[str, Any]:
        """One logged run's columns, the current visitor's alone on a public studio (`run_history`)."""
        return run_history.logged_run(self.runlog, run_id)

    def backup(self, destination: str | Path) -> Path:
        """A consistent copy of the run log at `destination` (`run_history.backup`)."""
        return run_history.backup(self.runlog, destination)

    def my_history(self, destination: str | Path) -> Path:
        """The current visitor's runs and images as one zip at `destination` (`run_history.my_history`)."""
        return run_history.my_history(self.runlog, self.outputs, destination)

    def forget_my_history(self) -> int:
        """Delete the current visitor's runs and images; how many runs went (`run_history`)."""
        return run_history.forget_my_history(self.runlog, self.outputs)

    def retention_words(self) -> str:
        """How long runs and images are kept here, in words (`studio.engine.retention`)."""
        return retention.policy().words

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

    def timeline(self, request: GenerationRequest, hardware: dict[str, Any]) -> list[speed_timeline.Era]:
        """`request`'s configuration's logged runs on the machine `hardware` describes, grouped by the library
        versions they ran under, each change of versions judged (`studio.engine.speed_timeline`)."""
        return speed_timeline.timeline(self.runlog, request, hardware)

    def shard(self, model: str, name: str, max_shard_size: int | str) -> dict[str, Any]:
        """`model` saved as sharded safetensors under the studio's home, `sharded/<name>` (an absolute `name`,
        the CLI's `--out`, as given): the report (`studio.engine.shard.shard_into_home`)."""
        return shard.shard_into_home(model, name, max_shard_size)

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
