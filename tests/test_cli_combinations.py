"""`python -m studio combinations`: a small real run on tiny-shapes, as a user runs it, printed for people, as
Markdown and as JSON; refused before anything runs where it would be too long."""

from __future__ import annotations

import json

import pytest

from studio.runlog import RunLog

SMALL = ("--steps", "2", "--width", "32", "--height", "32", "--rounds", "1")


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_two_cheap_techniques_and_a_conflict_measured_in_one_group_against_one_baseline(cli, tmp_path):
    status, out, err = cli(
        "combinations", "--techniques", "channels_last", "sdpa", "classic_attention", *SMALL, "--json"
    )
    assert status == 0, err
    data = json.loads(out)
    assert data["techniques"] == ["classic_attention", "sdpa", "channels_last"]
    cells = {(c["row"], c["column"]): c for c in data["cells"]}
    assert len(cells) == 6
    refused = cells["classic_attention", "sdpa"]
    assert refused["outcome"] == "refused" and "cannot be combined" in refused["reason"]
    measured = [c for c in data["cells"] if c["outcome"] == "measured"]
    assert len(measured) == 5, [c["reason"] for c in data["cells"] if c["outcome"] != "measured"]
    for cell in measured:
        assert cell["speedup"] > 0 and cell["status"] == "ok" and cell["run_id"] is not None
        assert cell["text"].startswith(("×", "≈")) and " / " in cell["text"]
    assert data["baseline"]["config"] == "baseline" and data["baseline"]["verdict"] == "baseline"
    runs = RunLog(tmp_path / "runs.db").runs(limit=20)
    assert {r["group_id"] for r in runs} == {data["group_id"]}, (
        "one group: every cell timed in the same rounds"
    )
    assert len(runs) == 6  # the baseline and the five cells that ran
    assert "cells to measure" in err and "[1/" in err and " min] " in err, "the progress goes to stderr"


def test_the_text_table_and_markdown_name_every_technique_and_list_the_reasons(cli):
    status, out, _ = cli("combinations", "--techniques", "sdpa", "classic_attention", *SMALL)
    assert status == 0
    assert "Columns:  1 classic_attention,  2 sdpa" in out
    assert " 1 classic_attention" in out and "refused: conflict" in out
    assert "Why:\n  classic_attention + sdpa: refused: classic_attention and sdpa cannot be combined" in out
    status, out, _ = cli("combinations", "--techniques", "sdpa", "classic_attention", *SMALL, "--markdown")
    assert status == 0
    assert "| | `classic_attention` | `sdpa` |" in out
    assert "- classic_attention + sdpa: refused:" in out


def test_combinations_over_the_time_limit_are_refused_before_anything_runs(cli, tmp_path, monkeypatch):
    monkeypatch.setenv("STUDIO_MAX_REQUEST_S", "30")
    status, out, err = cli("combinations", "--techniques", "torch_compile", "aot_package", "sdpa", *SMALL)
    assert status == 2 and out == ""
    assert (
        "These combinations would take about" in err and "STUDIO_MAX_REQUEST_S" in err and "max_cells" in err
    )
    assert RunLog(tmp_path / "runs.db").runs(limit=5) == [], "nothing ran, nothing was logged"
