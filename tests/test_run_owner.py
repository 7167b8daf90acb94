"""Runs in flight belong to the process computing them: only a dead owner's runs become `interrupted`."""

from __future__ import annotations

import subprocess
import sys

import psutil

from studio.runlog import RunLog


def _record() -> dict:
    return {"model": "tiny-shapes", "config_label": "baseline", "requested": [], "prompt": "a red circle"}


def test_a_live_processs_runs_are_left_alone_and_a_dead_ones_are_interrupted(runlog):
    mine = runlog.start_run(_record())
    dead_child = subprocess.Popen([sys.executable, "-c", "pass"])
    started = psutil.Process(dead_child.pid).create_time() if psutil.pid_exists(dead_child.pid) else 0.0
    dead_child.wait()
    orphan = runlog.start_run(_record())
    runlog.db["runs"].update(orphan, {"owner_pid": dead_child.pid, "owner_started": started})
    legacy = runlog.start_run(_record())
    runlog.db["runs"].update(legacy, {"owner_pid": None, "owner_host": None})

    second_studio = RunLog(runlog.path)  # another process starting on the same database
    assert second_studio.mark_interrupted() == 2
    assert runlog.get_run(mine)["status"] == "running", "a live process's run was taken from it"
    assert runlog.get_run(orphan)["status"] == "interrupted"
    assert runlog.get_run(legacy)["status"] == "interrupted"


def test_a_reused_pid_does_not_keep_a_dead_run_alive(runlog):
    run = runlog.start_run(_record())
    # Same pid as a live process (ours), but another start time: the original owner is gone.
    runlog.db["runs"].update(run, {"owner_started": psutil.Process().create_time() - 1000})
    assert runlog.mark_interrupted() == 1 and runlog.get_run(run)["status"] == "interrupted"
