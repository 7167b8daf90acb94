"""Faults in the middle of a sweep: the process killed during a Compare (then restarted), and one
configuration out of GPU memory (a fake: CUDA's own error, raised by the UNet where its weights are
channels-last). Each case returns an `Outcome` (tests/faults/cases.py)."""

from __future__ import annotations

import os
import signal
import sqlite3
import sys
import time
from pathlib import Path
from time import perf_counter
from unittest import mock

import torch

from tests import warm_python
from tests.faults.cases import Outcome, Workspace, lost
from tests.faults.runs import seeded

ROOT = Path(__file__).resolve().parents[2]
LOGGED_BEFORE = 1  # the run COMPARE logs before its sweep, which the kill must not lose
COMPARE = """
import sys
from pathlib import Path
from studio.engine import Studio
from studio.request import build_request
from studio.sweeps.compare import run_compare

home = Path(sys.argv[1])
studio = Studio(db_path=home / "runs.db", outputs=home / "out")
studio.generate(build_request(model="tiny-shapes", prompt="a red circle", steps=2))  # logged before
request = build_request(model="tiny-shapes", prompt="a red circle", steps=20)
run_compare(studio, request, ["channels_last", "sdpa"], warmup=0, rounds=50)
"""


def _sweep_running(db: Path) -> bool:
    """The Compare's three runs are logged `running` (its rounds under way)."""
    if not db.exists():
        return False
    query = "select count(*) from runs where status = 'running' and group_id is not null"
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
            return conn.execute(query).fetchone()[0] == 3
    except sqlite3.Error:
        return False


def killed_compare_case(ws: Workspace) -> Outcome:
    """A Compare of three configurations, SIGKILLed a second into its rounds; then the studio restarts on its
    run log. The sentence is the group's as History shows it; `facts` hold the group and its runs."""
    from studio.engine import Studio

    home = ws.root / "killed"
    home.mkdir(exist_ok=True)
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")
    proc = warm_python.Popen([sys.executable, "-c", COMPARE, str(home)], cwd=ROOT, env=env)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not _sweep_running(home / "runs.db"):
            time.sleep(0.2)
        started = _sweep_running(home / "runs.db")
        time.sleep(1.0)  # a few rounds in
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    start = perf_counter()
    studio = Studio(db_path=home / "runs.db", outputs=home / "out")  # the restart
    seconds = perf_counter() - start
    groups = studio.runlog.db.execute("select id, status, error from groups").fetchall()
    runs = studio.runlog.runs(limit=10)
    kept = [r for r in runs if r["group_id"] is None and r["status"] == "ok"]
    facts = {"started": started, "groups": groups, "runs": runs}
    said = f"{groups[0][1]}: {groups[0][2]}" if groups else "(no group logged)"
    alive = studio.runlog.db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    case = "process killed mid-Compare, then restarted"
    runs_lost = LOGGED_BEFORE - len(kept) if alive else LOGGED_BEFORE
    return Outcome(case, said, seconds, runs_lost, alive, facts)


def out_of_memory_case(ws: Workspace) -> Outcome:
    """A Compare of baseline, channels_last and sdpa where channels_last runs out of GPU memory."""
    from diffusers import UNet2DConditionModel

    from studio.sweeps.compare import run_compare
    from tests.tiny import request

    real = UNet2DConditionModel.forward

    def forward(self, *args, **kwargs):
        weight = self.conv_in.weight
        if weight.ndim == 4 and weight.is_contiguous(memory_format=torch.channels_last):
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return real(self, *args, **kwargs)

    studio = ws.studio("out-of-memory.db")
    before = seeded(studio)  # runs logged before the sweep, which it must not lose
    with mock.patch.object(UNet2DConditionModel, "forward", forward):
        start = perf_counter()
        result = run_compare(studio, request(steps=2), ["channels_last", "sdpa"], warmup=0, rounds=2)
        seconds = perf_counter() - start
    failed = [r for r in result.records if r["status"] != "ok"]
    facts = {
        "records": result.records,
        "logged": {r["config_label"]: r["status"] for r in studio.runlog.runs(limit=10) if r["group_id"]},
        "copies": [k for k in studio.manager.loaded() if "sweep" in str(k)],
    }
    said = " ".join(f"{r['config']}: {r['error']}" for r in failed) or "(every configuration ran)"
    alive = len(result.records) - len(failed) == 2 and not facts["copies"]
    case = "out of GPU memory in one configuration of a Compare"
    return Outcome(case, said, seconds, lost(studio.runlog, before), alive, facts)
