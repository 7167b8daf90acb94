"""STUDIO_HOME read-only (another user's folder, a read-only mount): the run log written there earlier opens
read-only, its history reads, a run is a sentence and is not recorded, and nothing in it changes. For root,
whom permissions do not stop, the check runs in a child process that has become `nobody`."""

from __future__ import annotations

import os

import pytest

from tests.faults import cases, runs

READ_ONLY = (
    "could not be written: it is read-only here (attempt to write a readonly database), so this run is "
    "not in the run log."
)
FIX = "Make STUDIO_HOME writable, or point STUDIO_DB at a writable file."


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork to drop root's privileges")
def test_a_read_only_home_reads_its_history_and_records_nothing(tmp_path):
    outcome = runs.read_only_home_case(cases.Workspace(tmp_path))
    assert "raised" not in outcome.facts, outcome.facts
    assert outcome.facts["read_only"] and outcome.facts["history"] == 2
    assert READ_ONLY in outcome.said and outcome.said.endswith(FIX)
    assert outcome.facts["new"].endswith("cannot be created: its folder is read-only. " + FIX)
    assert outcome.runs_lost == 0 and outcome.seconds < 2.0


def test_a_read_only_run_log_still_gives_the_user_the_image(tmp_path, one_torch_thread):
    outcome = runs.read_only_log_case(cases.Workspace(tmp_path))
    assert READ_ONLY in outcome.said
    result = outcome.facts["result"]
    assert result.run_id is None and len(result.images) == 1
    assert outcome.facts["history"] == 2 and outcome.runs_lost == 0 and outcome.alive
