"""The process killed in the middle of a Compare: on restart its group is closed as interrupted, its runs are
interrupted (none left `running`), the runs logged before it are kept, and History shows them so."""

from __future__ import annotations

from tests.faults import sweeps
from tests.faults.cases import Workspace


def test_a_compare_killed_mid_sweep_is_closed_as_interrupted_on_restart(tmp_path):
    outcome = sweeps.killed_compare_case(Workspace(tmp_path))
    assert outcome.facts["started"], "the Compare never started"
    [(group_id, status, error)] = outcome.facts["groups"]
    assert status == "interrupted" and "finished runs are kept" in error
    runs = outcome.facts["runs"]
    assert {r["status"] for r in runs if r["group_id"] == group_id} == {"interrupted"}
    assert [r["status"] for r in runs if r["group_id"] is None] == ["ok"], "the run logged before is kept"
    assert outcome.alive and outcome.runs_lost == 0 and outcome.said.startswith("interrupted: ")
