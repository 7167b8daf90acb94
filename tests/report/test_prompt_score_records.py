"""The prompt score in every face's words: the record's fields, the table cell, the sentence under a table,
the CSV's columns, and a run log from before prompt scores that still reads."""

from __future__ import annotations

from sqlite_utils import Database

from studio import report
from studio.optimizations import REGISTRY
from studio.report import text
from studio.runlog import RunLog
from studio.runlog.migrations import migrations

FIELDS = ("prompt_score", "prompt_score_by", "prompt_score_change", "prompt_score_note")
CLIP = "clip:openai/clip-vit-base-patch32"


def row(run_id: int, **figures) -> dict:
    """A run-log row of an ok run with the given figures."""
    return {"id": run_id, "status": "ok", "config_label": "baseline", "latency_s": 0.5, **figures}


def test_the_vocabulary_names_the_fields_with_their_units_in_csv_order():
    keys = list(report.KEYS)
    assert keys[keys.index("fidelity") + 1 :][:4] == list(FIELDS), "beside the other quality figures"
    assert report.KEYS["prompt_score"][0] == "points" and report.KEYS["prompt_score_change"][0] == "points"
    header = report.to_csv([report.log_record(row(1))]).splitlines()[0].split(",")
    assert [c for c in header if c.startswith("prompt_score")] == list(FIELDS)


def test_a_logged_run_reads_back_rounded_with_its_scorer_and_change():
    record = report.log_record(
        row(3, config_label="fp8", prompt_score=30.8472, prompt_score_by=CLIP, prompt_score_change=-0.5123)
    )
    assert (record["prompt_score"], record["prompt_score_change"], record["prompt_score_by"]) == (
        30.85,
        -0.51,
        CLIP,
    )
    assert text.prompt_score(record) == "30.9 (-0.5)"
    assert text.prompt_score(report.log_record(row(4, prompt_score=31.36, prompt_score_by=CLIP))) == "31.4"


def test_a_table_says_what_scored_it_and_why_a_score_is_missing():
    base = report.log_record(row(1, verdict="baseline", prompt_score=31.36, prompt_score_by=CLIP))
    fast = report.log_record(
        row(2, config_label="fp8", prompt_score=30.85, prompt_score_by=CLIP, prompt_score_change=-0.51)
    )
    table = report.markdown([base, fast])
    assert "| Prompt score |" in table.splitlines()[0]
    assert "| 31.4 |" in table and "| 30.9 (-0.5) |" in table
    assert (
        "Prompt score: the CLIP score of openai/clip-vit-base-patch32 (100 × the cosine of the image's and "
        "the prompt's embeddings); in brackets its change from the baseline's, in points." in table
    )
    why = "no CLIP model: openai/clip-vit-base-patch32 is not in the local Hugging Face cache"
    missing = report.log_record(row(5, prompt_score_note=why))
    assert text.prompt_score(missing) == "–"
    assert report.markdown([missing]).endswith(f"No prompt score: {why}.")
    failed = report.failed_record("fp8", "out of memory")
    assert report.readable_rows([failed])[0]["Prompt score"] == ""
    assert text.prompt_score_note([failed]) is None, "nothing ran: nothing to say"


def test_a_run_log_from_before_prompt_scores_keeps_its_runs_and_records_new_ones(tmp_path):
    path = tmp_path / "runs.db"
    old = Database(path)
    migrations.apply(old, stop_before="m009_prompt_score")
    old["runs"].insert({"status": "ok", "model": "tiny-shapes", "config_label": "baseline", "psnr": 31.5})
    old.close()
    log = RunLog(path, techniques=tuple(REGISTRY))
    (before,) = log.runs()
    record = report.log_record(before)
    assert before["psnr"] == 31.5 and {k: record[k] for k in FIELDS} == dict.fromkeys(FIELDS)
    assert text.prompt_score(record) == "–" and text.prompt_score_note([record]) is None
    run_id = log.start_run({"model": "tiny-shapes", "config_label": "fp8"})
    log.finish_run(run_id, "ok", prompt_score=30.0, prompt_score_by=CLIP, prompt_score_change=-1.25)
    assert {k: log.get_run(run_id)[k] for k in FIELDS} == {
        "prompt_score": 30.0,
        "prompt_score_by": CLIP,
        "prompt_score_change": -1.25,
        "prompt_score_note": None,
    }
