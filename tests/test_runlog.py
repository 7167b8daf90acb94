"""The SQLite run log: lifecycle, filters, migrations, concurrency, crash leftovers."""

import json
import multiprocessing
import sqlite3
import threading

import pytest

from studio import report
from studio.runlog import RunLog
from studio.runlog.migrations import migrations


def record(**kw):
    base = {
        "model": "tiny-shapes",
        "device": "cpu",
        "prompt": "a red circle",
        "seed": 1,
        "steps": 20,
        "requested": ["bf16"],
        "config_label": "bf16",
    }
    return {**base, **kw}


def test_run_lifecycle_and_json_columns(runlog):
    run_id = runlog.start_run(record())
    assert runlog.get_run(run_id)["status"] == "running"
    runlog.finish_run(run_id, "ok", latency_s=0.5, applied=["bf16"], latency_all=[0.5, 0.6])
    row = runlog.get_run(run_id)
    assert row["status"] == "ok" and row["applied"] == ["bf16"] and row["latency_all"] == [0.5, 0.6]
    assert row["opt_bf16"] == 1 and row["opt_fp16"] == 0
    assert row["finished_at"] >= row["created_at"]


def test_filters(runlog):
    a = runlog.start_run(record())
    b = runlog.start_run(record(model="sd15", requested=[]))
    runlog.finish_run(a, "ok")
    runlog.finish_run(b, "failed", error="boom")
    assert [r["id"] for r in runlog.runs(model="sd15")] == [b]
    assert [r["id"] for r in runlog.runs(status="ok")] == [a]
    assert [r["id"] for r in runlog.runs(technique="bf16")] == [a]
    assert [r["id"] for r in runlog.runs()] == [b, a]
    with pytest.raises(ValueError):
        runlog.runs(technique="nope")


def test_migrations_are_idempotent_and_survive_reopen(runlog):
    run_id = runlog.start_run(record())
    again = RunLog(runlog.path)
    assert again.get_run(run_id)["prompt"] == "a red circle"
    assert [m.name for m in migrations.pending(again.db)] == []
    assert again.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_a_run_log_from_before_the_settings_column_keeps_its_settings(tmp_path):
    """A database written when the column was called `params` opens with its runs' settings intact."""
    from sqlite_utils import Database

    path = tmp_path / "runs.db"
    old = Database(path)
    migrations.apply(old, stop_before="m004_settings_column")
    old["runs"].insert({"status": "ok", "model": "tiny-shapes", "params": '{"deepcache": {"interval": 2}}'})
    old.close()
    row = RunLog(path).runs()[0]
    assert row["settings"] == {"deepcache": {"interval": 2}} and "params" not in row


def test_runs_record_the_vae_and_config_folder_they_were_loaded_with(tmp_path):
    """A database from before m005 gains the columns (empty for its runs); a new run records its VAE."""
    from sqlite_utils import Database

    from pipelines.registry import ASSETS
    from studio.engine.run_data import run_columns
    from studio.request import build_request

    path = tmp_path / "runs.db"
    old = Database(path)
    migrations.apply(old, stop_before="m005_model_sources")
    old["runs"].insert({"status": "ok", "model": "tiny-shapes"})
    old.close()
    log = RunLog(path)
    assert (log.runs()[0]["vae"], log.runs()[0]["single_file_config"]) == (None, None)
    vae = str(ASSETS / "tiny-shapes")
    request = build_request(model="tiny-shapes", prompt="a red circle", vae=vae)
    row = log.get_run(log.start_run(run_columns(request, 0, 1, None)))
    assert (row["vae"], row["single_file_config"]) == (vae, None)


def _start_a_run_and_die(path) -> None:
    RunLog(path).start_run(record())  # the process ends with its run still `running`, like a crash


def test_interrupted_runs_are_marked_at_startup(tmp_path):
    """A process that died mid-run left it `running`; the next studio to open the log marks it interrupted."""
    crashed = multiprocessing.get_context("fork").Process(
        target=_start_a_run_and_die, args=(tmp_path / "runs.db",)
    )
    crashed.start()
    crashed.join()
    assert crashed.exitcode == 0
    log = RunLog(tmp_path / "runs.db")
    (left,) = [r["id"] for r in log.runs(status="running")]
    done = log.start_run(record())
    log.finish_run(done, "ok")
    assert RunLog(tmp_path / "runs.db").mark_interrupted() == 1
    assert log.get_run(left)["status"] == "interrupted"
    assert log.get_run(done)["status"] == "ok"


def test_concurrent_writers_lose_nothing(tmp_path):
    path = tmp_path / "runs.db"
    logs = [RunLog(path), RunLog(path)]
    errors = []

    def writer(log, n):
        try:
            for _ in range(n):
                rid = log.start_run(record())
                log.finish_run(rid, "ok", latency_s=0.1)
        except sqlite3.Error as exc:  # recorded, then asserted below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(logs[i % 2], 25)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert RunLog(path).db.execute("select count(*), sum(status = 'ok') from runs").fetchone() == (150, 150)
    assert RunLog(path).db.execute("PRAGMA integrity_check").fetchone() == ("ok",)


def test_groups_and_csv(runlog):
    gid = runlog.start_group("compare", model="tiny-shapes", settings={"configs": ["baseline", "bf16"]})
    rid = runlog.start_run(record(group_id=gid))
    runlog.finish_run(
        rid,
        "ok",
        applied=["bf16"],
        latency_s=0.5,
        latency_all=[0.5, 0.6],
        peak_memory=3 * 2**20,
        speedup=1.25,
        speedup_min=1.1,
        speedup_max=1.4,
        verdict="faster",
        host_busy_pct=3.0,
    )
    runlog.finish_group(gid)
    group = runlog.db["groups"].get(gid)  # the groups table, as a copy of the database shows it
    assert (json.loads(group["settings"]), group["status"]) == ({"configs": ["baseline", "bf16"]}, "ok")
    rows = runlog.runs(group_id=gid)
    assert [r["id"] for r in rows] == [rid]
    records = [report.log_record(r) for r in rows]
    assert (
        records[0]["latency_s"] == 0.5 and records[0]["latency_spread_s"] == 0.1 and records[0]["rounds"] == 2
    )
    assert records[0]["peak_memory_mb"] == 3.0 and records[0]["verdict"] == "faster"
    assert not records[0]["host_busy"] and records[0]["speedup_min"] == 1.1
    text = report.to_csv(records)
    header = text.splitlines()[0].split(",")
    assert header[: len(report.KEYS)] == list(report.KEYS) and {"created_at", "model"} <= set(header)
    assert "peak_memory" not in header, "the raw byte count is read as peak_memory_mb"
    assert '"[""bf16""]"' in text, "lists are JSON in one cell"


def test_a_run_still_running_reads_as_a_record_without_figures(runlog):
    record_ = report.log_record(runlog.get_run(runlog.start_run(record())))
    assert record_["status"] == "running" and record_["latency_s"] is None and record_["rounds"] is None
    assert record_["peak_memory_mb"] is None and record_["host_busy"] is False
