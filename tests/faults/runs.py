"""Faults that strike while the studio runs and logs a generation (the bundled model, 2 steps at 64x64): a
full disk at the run log's first or last write or at the PNG's, a read-only run log or STUDIO_HOME, another
process holding the run log's lock. Each case returns an `Outcome` (tests/faults/cases.py)."""

from __future__ import annotations

from time import perf_counter
from typing import Any

from studio.errors import RunLogError, StudioError, describe
from studio.optimizations import REGISTRY
from studio.request import build_request
from studio.runlog import RunLog
from tests.faults import inject
from tests.faults.cases import Outcome, Workspace, lost, serves, snapshot
from tests.faults.files import PROMPT

QUIET = "(no warning: the run was logged)"
HOST_NOTE = "The host was busy while this was measured"


def generate(studio: Any, seed: int = 1) -> tuple[str, float, Any]:
    """One tiny-shapes generation as a face runs it: the warnings the user is shown (or the error's sentence;
    a busy host's note is left out), the seconds to answer, and the result (None when it failed)."""
    request = build_request(model="tiny-shapes", prompt=PROMPT, steps=2, seed=seed)
    start = perf_counter()
    try:
        result = studio.generate(request)
    except StudioError as exc:
        return describe(exc), perf_counter() - start, None
    shown = [w for w in result.warnings if not w.startswith(HOST_NOTE)]  # other processes' load: not a fault
    return " ".join(shown) or QUIET, perf_counter() - start, result


def seeded(studio: Any, runs: int = 2) -> dict[int, dict[str, Any]]:
    """`runs` runs logged before the fault: what it must not lose."""
    for seed in range(runs):
        generate(studio, 100 + seed)
    return snapshot(studio.runlog)


def _row(studio: Any, result: Any) -> dict[str, Any] | None:
    return None if result is None or result.run_id is None else studio.runlog.get_run(result.run_id)


def disk_full_case(ws: Workspace, at: str) -> Outcome:
    """The disk fills at the run's first write (`at="start"`: the run is logged `running`) or its last
    (`"finish"`: its results); the disk is then freed and one more run is made."""
    with inject.filling_disk() as disk:
        studio = ws.studio(f"full-at-{at}.db")
        before = seeded(studio)
        disk.statements = ("INSERT",) if at == "start" else ("UPDATE",)
        disk.full = True
        said, seconds, result = generate(studio)
        facts = {"result": result, "row": _row(studio, result)}
        disk.full = False
        alive = serves(lambda: generate(studio, 2)[2].run_id)
    facts.update(after=_row(studio, result), runs=snapshot(studio.runlog))
    case = f"disk full at the run's {'first' if at == 'start' else 'last'} run-log write"
    return Outcome(case, said, seconds, lost(studio.runlog, before), alive, facts)


def image_disk_full_case(ws: Workspace) -> Outcome:
    """The disk is full (ENOSPC) when the run's PNG is written."""
    studio = ws.studio("full-images.db")
    before = seeded(studio)
    with inject.full_disk_for_images(studio.outputs) as refused:
        said, seconds, result = generate(studio)
    alive = serves(lambda: generate(studio, 2)[2].image_paths)
    facts = {"result": result, "row": _row(studio, result), "refused": refused}
    return Outcome(
        "disk full writing the PNG (ENOSPC)", said, seconds, lost(studio.runlog, before), alive, facts
    )


def read_only_log_case(ws: Workspace) -> Outcome:
    """The run log is read-only while runs are made (as `RunLog` opens one in a read-only STUDIO_HOME)."""
    studio = ws.studio("read-only.db")
    before = seeded(studio)
    studio.runlog = RunLog(studio.runlog.path, tuple(REGISTRY), read_only=True)
    said, seconds, result = generate(studio)
    facts = {"result": result, "history": len(studio.runlog.runs())}
    alive = serves(lambda: generate(studio, 2)[2].images)
    return Outcome("read-only run log during a run", said, seconds, lost(studio.runlog, before), alive, facts)


def read_only_home_case(ws: Workspace) -> Outcome:
    """STUDIO_HOME is read-only to the studio's process (another user's folder, a read-only mount): its run
    log, written earlier, is opened, read and written to; a new run log is asked for beside it."""
    with inject.read_only_home() as home:
        log = RunLog(home / "runs.db")
        for seed in range(2):
            log.finish_run(log.start_run({"model": "tiny-shapes", "seed": seed}), "ok")
        before = snapshot(log)
        del log

        def as_the_studio() -> dict[str, Any]:
            start = perf_counter()
            opened = RunLog(home / "runs.db")
            facts = {"read_only": opened.read_only, "history": len(opened.runs())}
            try:
                opened.start_run({"model": "tiny-shapes"})
                facts["said"] = "the run was logged"
            except RunLogError as exc:
                facts["said"] = str(exc)
            facts["seconds"] = perf_counter() - start
            try:
                RunLog(home / "new.db")
            except RunLogError as exc:
                facts["new"] = str(exc)
            return facts

        facts = inject.as_another_user(home, as_the_studio)
        runs_lost = lost(RunLog(home / "runs.db"), before)
    said = facts.get("said") or facts.get("raised", "")
    alive = "raised" not in facts and facts.get("history") == 2
    return Outcome("STUDIO_HOME read-only", said, facts.get("seconds", 0.0), runs_lost, alive, facts)


def locked_case(ws: Workspace, hold: float, timeout: float) -> Outcome:
    """Another process holds the run log's write lock for `hold` s while a run starts; the studio waits up to
    `timeout` s for each write."""
    studio = ws.studio(f"locked-{hold:g}s.db", timeout=timeout)
    before = seeded(studio, 1)
    with inject.locked_by_another_process(studio.runlog.path, hold):
        said, seconds, result = generate(studio)
    facts = {"result": result, "row": _row(studio, result), "runs": snapshot(studio.runlog)}
    alive = serves(lambda: generate(studio, 2)[2].run_id)
    case = f"run log locked {hold:g} s by another process (wait {timeout:g} s)"
    return Outcome(case, said, seconds, lost(studio.runlog, before), alive, facts)
