"""Crash safety: SIGKILL the real app at random moments; no acknowledged run is ever lost."""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from pathlib import Path

import pytest
from gradio_client import Client

from studio.runlog import RunLog
from tests.server import Server

PROMPT = "a small red star on the right, on a black background"
KILLS = int(os.environ.get("STUDIO_CRASH_KILLS", "20"))


def _send(client: Client, acknowledged: dict[int, str], rng: random.Random) -> None:
    steps = rng.choice([2, 4, 8])
    _, _, metrics = client.predict("tiny-shapes", "", "auto", "fp32", [], PROMPT, "", rng.randrange(1000), steps,
                                   6.0, 64, 64, "default", "", api_name="/generate")
    acknowledged[metrics["run_id"]] = metrics["image_path"]


def _send_until_killed(client: Client, acknowledged: dict[int, str], rng: random.Random, stop: threading.Event) -> None:
    try:
        while not stop.is_set():
            _send(client, acknowledged, rng)
    except Exception:  # noqa: BLE001  the server was killed under us: that is the point of the test
        return


@pytest.mark.slow
def test_sigkill_at_random_moments_loses_no_acknowledged_run(tmp_path):
    rng = random.Random(20261122)
    acknowledged: dict[int, str] = {}
    db = tmp_path / "runs.db"
    for kill in range(KILLS + 1):
        srv = Server(tmp_path).start()
        log = RunLog(db)
        assert log.integrity_ok(), f"database damaged after kill {kill}"
        assert log.runs(status="running") == [], "runs left running must be marked interrupted at start-up"
        for run_id, image in acknowledged.items():
            row = log.get_run(run_id)
            assert row["status"] == "ok" and row["image_path"] == image and Path(image).is_file(), run_id
        if kill == KILLS:
            srv.stop()
            break
        client = Client(srv.url, verbose=False)
        _send(client, acknowledged, rng)  # the pipeline is loaded: from here a kill can land anywhere in a run
        stop = threading.Event()
        sender = threading.Thread(target=_send_until_killed, args=(client, acknowledged, rng, stop), daemon=True)
        sender.start()
        time.sleep(rng.uniform(0.05, 3.0))
        srv.stop(signal.SIGKILL)
        stop.set()
        sender.join(timeout=60)
        assert not sender.is_alive(), "a client hung after the server died"
    assert len(acknowledged) >= KILLS, f"too few runs were acknowledged to test anything: {len(acknowledged)}"
    statuses = {r["status"] for r in RunLog(db).runs(limit=10_000)}
    assert statuses <= {"ok", "interrupted"}
