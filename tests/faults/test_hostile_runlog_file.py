"""A database handed back to the studio as its run log (STUDIO_DB, `--db`, `RunLog(path)`): a file that is not
SQLite, another program's SQLite database, a damaged run log, a run log whose JSON was edited by hand. Each is
refused with a sentence and left byte for byte as it was; nothing is created beside it."""

from __future__ import annotations

import pytest

from studio.cli import main
from studio.errors import RunLogError, ValidationError
from studio.runlog import RunLog
from tests.faults import cases, files

SAID = {
    "run log: a text file": "is not a SQLite database, so it is not a run log; the studio left it untouched.",
    "run log: another program's SQLite": "is a SQLite database of another program (its tables: contacts)",
    "run log: damaged pages": "could not be opened: it is damaged (database disk image is malformed)",
}


@pytest.mark.parametrize("name", list(cases.RUN_LOG_FILES))
def test_a_file_that_is_not_a_run_log_is_refused_untouched(tmp_path, name):
    workspace = cases.Workspace(tmp_path)
    outcome = cases.run_log_file_case(workspace, name)
    assert SAID[name] in outcome.said, outcome.said
    assert "STUDIO_DB" in outcome.said, "the sentence says what to do"
    assert outcome.runs_lost == 0, "the file handed over changed, or the studio's own run log lost runs"
    assert outcome.alive and outcome.seconds < 2.0
    path = outcome.facts["path"]
    assert sorted(p.name for p in path.parent.glob(path.name + "*")) == [path.name], (
        "no -wal or -shm beside it"
    )


def test_the_cli_says_the_sentence_for_a_foreign_database(tmp_path, monkeypatch, capsys):
    contacts = files.foreign_sqlite(tmp_path)
    monkeypatch.setenv("STUDIO_DB", str(contacts))
    assert main(["history"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "is a SQLite database of another program" in err
    assert "Traceback" not in err


def test_a_run_log_whose_json_was_edited_by_hand_reads_as_a_sentence(tmp_path):
    log = RunLog(tmp_path / "runs.db")
    kept = log.start_run({"model": "tiny-shapes", "settings": {"deepcache": {"interval": 2}}})
    edited = log.start_run({"model": "tiny-shapes"})
    log.db.execute("update runs set settings = ? where id = ?", ["[" * 100_000 + "]" * 100_000, edited])
    with pytest.raises(ValidationError, match=f"The settings of row {edited} of the run log nests 100,000"):
        log.runs()
    assert log.get_run(kept)["settings"] == {"deepcache": {"interval": 2}}, "the other rows still read"


def test_a_run_log_whose_tables_were_dropped_is_refused(tmp_path):
    log = RunLog(tmp_path / "runs.db")
    log.db.execute("drop table runs")
    with pytest.raises(RunLogError, match="not a Diffusion Studio run log"):
        RunLog(tmp_path / "runs.db")
