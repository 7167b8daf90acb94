"""The run log of the previous release (tests/fixtures/runs-previous-release.db: a batch of two, then a
Compare of the baseline and channels_last) opens in this one with every run and its meaning kept."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

from studio.report import image_metadata, records
from studio.runlog import RunLog

FIXTURES = Path(__file__).parent / "fixtures"


def test_a_run_log_of_the_previous_release_reads_the_same_runs(tmp_path):
    path = tmp_path / "runs.db"
    shutil.copy(FIXTURES / "runs-previous-release.db", path)
    before = json.loads((FIXTURES / "runs-previous-release.json").read_text())
    with sqlite3.connect(path) as db:  # a Combinations group as the previous release named it
        db.execute("INSERT INTO groups (id, kind, status) VALUES (2, 'matrix', 'ok')")
    log = RunLog(path)
    after = [records.log_record(run) for run in log.runs()]
    assert after == before, (
        "a record read from a migrated run log differs from what the previous release read"
    )
    columns = {c[1] for c in sqlite3.connect(path).execute("PRAGMA table_info(runs)")}
    assert {"batch", "rounds", "latency_s"} <= columns
    assert not columns & {"num_images", "repeats", "latency_median"}, "the columns keep one name each"
    kinds = dict(sqlite3.connect(path).execute("SELECT id, kind FROM groups"))
    assert kinds == {1: "compare", 2: "combinations"}
    first = log.get_run(1)
    assert (first["batch"], first["rounds"]) == (2, 3)
    assert abs(first["latency_s"] - before[-1]["latency_s"]) < 1e-4
    log.close()
    assert [r["run_id"] for r in records_of(path)] == [r["run_id"] for r in before], (
        "reopening changes nothing"
    )


def records_of(path: Path) -> list[dict]:
    log = RunLog(path)
    try:
        return [records.log_record(run) for run in log.runs()]
    finally:
        log.close()


def test_an_image_saved_by_the_previous_release_loads_its_batch(tmp_path):
    """An earlier release's image names the batch `num_images`: Load from image still reads it."""
    meta = {
        "format": 1,
        "run_id": 1,
        "model": "tiny-shapes",
        "prompt": "p",
        "seed": 3,
        "steps": 4,
        "num_images": 2,
        "repeats": 3,
        "latency_median": 0.08,
        "requested": ["channels_last"],
    }
    png = tmp_path / "old.png"
    from PIL import Image, PngImagePlugin

    info = PngImagePlugin.PngInfo()
    info.add_text(image_metadata.JSON_CHUNK, json.dumps(meta))
    Image.new("RGB", (8, 8)).save(png, pnginfo=info)
    found = image_metadata.read(png)
    assert found.settings["batch"] == 2 and found.settings["latency_s"] == 0.08
    fields = image_metadata.fields_from_settings(found.settings, "tiny-shapes")
    assert fields["batch"] == 2 and fields["optimizations"] == ["channels_last"]
