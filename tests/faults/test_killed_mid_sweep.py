"""The process killed in the middle of a Compare: on restart its group is closed as interrupted, its runs are
interrupted (none left `running`), the runs logged before it are kept, and History shows them so."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time

from studio.engine import Studio
from tests.server import ROOT

COMPARE = """
import sys
from pathlib import Path
from studio.engine import Studio
from studio.request import validate_request
from studio.sweeps.compare import run_compare

home = Path(sys.argv[1])
studio = Studio(db_path=home / "runs.db", outputs=home / "out")
studio.generate(validate_request(model="tiny-shapes", prompt="a red circle", steps=2))  # logged before
request = validate_request(model="tiny-shapes", prompt="a red circle", steps=20)
run_compare(studio, request, ["channels_last", "sdpa"], warmup=0, rounds=50)
"""


def test_a_compare_killed_mid_sweep_is_closed_as_interrupted_on_restart(tmp_path):
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")
    proc = subprocess.Popen([sys.executable, "-c", COMPARE, str(tmp_path)], cwd=ROOT, env=env)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not _sweep_running(tmp_path):
            time.sleep(0.2)
        assert _sweep_running(tmp_path), "the Compare never started"
        time.sleep(1.0)  # a few rounds in
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    studio = Studio(db_path=tmp_path / "runs.db", outputs=tmp_path / "out")  # the restart
    [group] = studio.runlog.db.execute("select id, status, error from groups").fetchall()
    assert group[1] == "interrupted" and "finished runs are kept" in group[2]
    runs = studio.runlog.runs(limit=10)
    assert {r["status"] for r in runs if r["group_id"] == group[0]} == {"interrupted"}
    assert [r["status"] for r in runs if r["group_id"] is None] == ["ok"], "the run logged before is kept"
    assert studio.runlog.integrity_ok()


def _sweep_running(home) -> bool:
    """The Compare's three runs are logged `running` (its rounds under way)."""
    db = home / "runs.db"
    if not db.exists():
        return False
    query = "select count(*) from runs where status = 'running' and group_id is not null"
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
            return conn.execute(query).fetchone()[0] == 3
    except sqlite3.Error:
        return False
