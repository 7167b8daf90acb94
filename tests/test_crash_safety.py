"""Crash safety: SIGKILL studio processes at random moments; no acknowledged run is ever lost.

The kills land on studio processes forked from one that has already imported the studio
(tests/crash_worker.py): each opens the run log, loads the pipeline and writes images itself, and each kill is
a real SIGKILL of a process mid-run; only the imports are not paid again. One more test kills the real server
(`python app.py`, gradio in front) in the middle of a request sent through its API, and starts it again.
"""

from __future__ import annotations

import json
import os
import queue
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from studio.runlog import RunLog
from tests import warm_python

ROOT = Path(__file__).resolve().parent.parent
PROMPT = "a small red star on the right, on a black background"
# Each kill costs ~2 s (a fork that loads the pipeline, its runs, the kill): 12 spread over every phase of a
# run (the test checks one landed inside a run); STUDIO_CRASH_KILLS=200 for a longer hunt.
KILLS = int(os.environ.get("STUDIO_CRASH_KILLS", "12"))


def check_log(db: Path, acknowledged: dict[int, str], when: str) -> None:
    log = RunLog(db)
    assert log.db.execute("PRAGMA integrity_check").fetchone() == ("ok",), f"database damaged {when}"
    for run_id, image in acknowledged.items():
        row = log.get_run(run_id)
        assert row["status"] == "ok" and row["image_path"] == image and Path(image).is_file(), (when, run_id)


class Workers:
    """The forking parent of tests/crash_worker.py and the messages of its children, in order."""

    def __init__(self, home: Path):
        self.proc = warm_python.Popen(
            [sys.executable, "-m", "tests.crash_worker", str(home)],
            cwd=ROOT,
            text=True,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        self.messages: queue.Queue[dict] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.messages.put(json.loads(line))
        self.messages.put({"eof": self.proc.wait()})

    def next(self, timeout: float = 120) -> dict:
        message = self.messages.get(timeout=timeout)
        assert "eof" not in message, f"the worker parent exited with {message['eof']}"
        return message

    def start(self, seed: int) -> None:
        self.proc.stdin.write(f"{seed}\n")
        self.proc.stdin.flush()

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


@pytest.mark.slow
def test_sigkill_at_random_moments_loses_no_acknowledged_run(tmp_path):
    rng = random.Random(20261122)
    acknowledged: dict[int, str] = {}
    db = tmp_path / "runs.db"
    workers = Workers(tmp_path)
    try:
        for kill in range(KILLS):
            workers.start(rng.randrange(10**6))
            pid, own = None, 0
            while not own:  # up, and one run of its own acknowledged
                message = workers.next()
                assert "exited" not in message, f"studio process {message['exited']} died on its own"
                pid = message.get("pid", pid)
                if "ready" in message:
                    assert message["running"] == [], "left running: must be marked interrupted at start-up"
                    check_log(db, acknowledged, f"after kill {kill}")
                if "ack" in message:
                    acknowledged[message["ack"]] = message["image"]
                    own += 1
            # The pipeline is loaded: a kill can land anywhere in a run. A run (2-8 steps at 64x64, PNG, two
            # log writes) takes 0.05-0.15 s here, so a window of over 1 s spreads the kills over every phase.
            time.sleep(rng.uniform(0.05, 1.2))
            os.kill(pid, signal.SIGKILL)
            while "exited" not in (message := workers.next()):
                acknowledged[message["ack"]] = message["image"]  # printed before it died: acknowledged
            assert message["status"] == signal.SIGKILL, f"studio process {pid} ended with {message['status']}"
    finally:
        workers.close()
    log = RunLog(db)
    log.mark_interrupted()  # what the next studio process does at start-up
    check_log(db, acknowledged, "at the end")
    statuses = [r["status"] for r in log.runs(limit=10_000)]
    assert len(acknowledged) >= KILLS, f"too few runs were acknowledged to test anything: {len(acknowledged)}"
    assert set(statuses) <= {"ok", "interrupted"}
    assert "interrupted" in statuses, "no kill ever landed inside a run"


@pytest.mark.slow
def test_sigkill_of_the_real_server_mid_request_loses_no_acknowledged_run(tmp_path):
    from gradio_client import Client

    from tests.server import Server

    def send(client: Client, seed: int) -> tuple[int, str]:
        _, _, metrics = client.predict(
            "tiny-shapes",
            "",
            "auto",
            "fp32",
            [],
            PROMPT,
            "",
            seed,
            8,
            6.0,
            64,
            64,
            "default",
            "",
            api_name="/generate",
        )
        return metrics["run_id"], metrics["image_path"]

    db = tmp_path / "runs.db"
    srv = Server(tmp_path).start()
    client = Client(srv.url, verbose=False)
    acknowledged = dict([send(client, 1)])
    job = client.submit(
        "tiny-shapes",
        "",
        "auto",
        "fp32",
        [],
        PROMPT,
        "",
        2,
        50,
        6.0,
        64,
        64,
        "default",
        "",
        api_name="/generate",
    )
    deadline = time.monotonic() + 60
    while not RunLog(db).runs(status="running"):  # the second run has begun computing
        assert time.monotonic() < deadline, "the second request never started"
        time.sleep(0.02)
    srv.stop(signal.SIGKILL)
    assert not job.done() or job.exception(timeout=0) is not None, "the killed request cannot have completed"
    srv = Server(tmp_path).start()
    try:
        log = RunLog(db)
        assert log.runs(status="running") == [], "the killed run must be marked interrupted at start-up"
        check_log(db, acknowledged, "after the server was killed")
        assert [r["status"] for r in log.runs(limit=10)] == ["interrupted", "ok"]
        acknowledged.update([send(Client(srv.url, verbose=False), 3)])
        check_log(db, acknowledged, "after a run on the restarted server")
    finally:
        srv.stop()
