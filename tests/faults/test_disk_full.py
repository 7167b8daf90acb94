"""The disk fills while a run is logged: at its first run-log write (the run as `running`), at its last (its
results), or when its PNG is written. The user keeps the image and gets a sentence; the run log keeps every
earlier run intact, holds no half-written run, and takes the results that waited once the disk has room."""

from __future__ import annotations

import pytest

from studio.errors import RunLogError
from studio.runlog import RunLog
from tests.faults import cases, inject, runs

pytestmark = pytest.mark.usefixtures("one_torch_thread")
FULL = "could not be written: its disk is full, so "
FIX = "Free disk space, or point STUDIO_DB at a file on another disk."


@pytest.fixture
def workspace(tmp_path):
    return cases.Workspace(tmp_path)


def test_full_at_the_first_write_the_run_is_shown_but_not_logged(workspace):
    outcome = runs.disk_full_case(workspace, "start")
    assert FULL + "this run is not in the run log. " + FIX in outcome.said
    result = outcome.facts["result"]
    assert result.run_id is None and len(result.images) == 1, "the user still gets the image"
    assert outcome.runs_lost == 0 and outcome.alive
    statuses = [row["status"] for row in outcome.facts["runs"].values()]
    assert statuses == ["ok", "ok", "ok"], "two runs before, one after the disk was freed: none half-written"


def test_full_at_the_last_write_the_results_wait_and_are_written_with_the_next_run(workspace):
    outcome = runs.disk_full_case(workspace, "finish")
    assert FULL + "this run's results wait in memory and are written with the next run" in outcome.said
    assert outcome.facts["row"]["status"] == "running", "not half-written: the run still shows running"
    after = outcome.facts["after"]
    assert after["status"] == "ok" and after["latency_s"] > 0 and after["image_path"].endswith(".png")
    assert outcome.runs_lost == 0 and outcome.alive
    assert [row["status"] for row in outcome.facts["runs"].values()] == ["ok"] * 4


def test_full_when_the_png_is_written_the_run_is_logged_without_it(workspace):
    outcome = runs.image_disk_full_case(workspace)
    assert "The image could not be saved under" in outcome.said and "No space left on device" in outcome.said
    assert outcome.said.endswith("it is shown but not stored.")
    row = outcome.facts["row"]
    assert row["status"] == "ok" and row["image_path"] is None and row["latency_s"] > 0
    assert outcome.facts["refused"] and outcome.runs_lost == 0 and outcome.alive


def test_a_commit_the_disk_refuses_leaves_nothing_behind_for_the_next_write(tmp_path):
    """SQLite refuses the COMMIT itself: the connection is rolled back, so the next write is not swallowed
    into a transaction nobody commits (another connection sees it)."""
    with inject.filling_disk() as disk:
        log = RunLog(tmp_path / "runs.db")
        kept = log.start_run({"model": "tiny-shapes"})
        disk.statements, disk.full = ("COMMIT",), True
        with pytest.raises(RunLogError, match=FULL + "this run is not in the run log"):
            log.start_run({"model": "tiny-shapes", "seed": 1})
        disk.full = False
        later = log.start_run({"model": "tiny-shapes", "seed": 2})
        assert not log.db.conn.in_transaction
    other = RunLog(tmp_path / "runs.db")
    assert [r["id"] for r in other.runs()] == [later, kept]
    assert other.db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
