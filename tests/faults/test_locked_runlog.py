"""Another process holds the run log's write lock (a database browser, a backup, `sqlite3 runs.db` with a
transaction open): a short hold is waited out and the run is logged; a long one ends the wait with a
sentence, the image still shown, and no half-written run (`RunLog(timeout=...)` sets the wait)."""

from __future__ import annotations

import pytest

from studio.errors import RunLogError
from studio.runlog import RunLog
from tests.faults import cases, inject, runs

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_a_lock_shorter_than_the_wait_is_waited_out(tmp_path):
    outcome = runs.locked_case(cases.Workspace(tmp_path), hold=1.0, timeout=10.0)
    assert outcome.said == runs.QUIET
    assert outcome.seconds >= 0.9, "the run's first write waited for the lock"
    assert outcome.facts["row"]["status"] == "ok" and outcome.runs_lost == 0 and outcome.alive


def test_a_lock_longer_than_the_wait_is_a_sentence_and_no_half_written_run(tmp_path):
    outcome = runs.locked_case(cases.Workspace(tmp_path), hold=3.0, timeout=0.5)
    assert "could not be written: another program (a database browser" in outcome.said
    assert "held it over 0.5 s" in outcome.said
    assert "so this run is not in the run log. Close that program or wait for it" in outcome.said
    assert 0.5 <= outcome.seconds < 2.5, "answered after the wait, not after the lock"
    result = outcome.facts["result"]
    assert result.run_id is None and len(result.images) == 1
    assert [row["status"] for row in outcome.facts["runs"].values()] == ["ok"], "nothing half-written"
    assert outcome.runs_lost == 0 and outcome.alive


def test_results_a_lock_kept_out_are_written_once_it_is_gone(tmp_path):
    log = RunLog(tmp_path / "runs.db", timeout=0.3)
    run_id = log.start_run({"model": "tiny-shapes"})
    with inject.locked_by_another_process(log.path, 1.5):
        with pytest.raises(RunLogError, match="this run's results wait in memory"):
            log.finish_run(run_id, "ok", latency_s=0.25)
    assert RunLog(log.path).get_run(run_id)["status"] == "running", "not half-written: still all running"
    log.start_run({"model": "tiny-shapes", "seed": 1})
    row = RunLog(log.path).get_run(run_id)
    assert (row["status"], row["latency_s"]) == ("ok", 0.25)
