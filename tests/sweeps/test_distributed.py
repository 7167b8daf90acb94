"""`python -m studio.distributed`: a sweep spread over 2 real CPU processes (gloo), one writer, one group.

The two slow tests start real launchers (torchrun, accelerate launch) with `sys.executable`, so they pay
for three interpreters importing torch and diffusers on a 2-core machine: about 35-50 s each here. The
failure paths run `main` in this process (a world of one) with an injected failure.
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

ROOT = Path(__file__).resolve().parents[2]
PROMPT = "a big green triangle on the right, on a white background"
CONFIGS = ["baseline", "channels_last", "attention_slicing"]
REQUEST = ["--prompt", PROMPT, "--seed", "1", "--steps", "2", "--device", "cpu"]


def launch(launcher: list[str], *args: str, home: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "STUDIO_HOME": str(home), "HF_HUB_OFFLINE": "1"}
    return subprocess.run(
        [sys.executable, "-m", *launcher, "-m", "studio.distributed", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def free_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


def rows(db: Path, sql: str) -> list[dict]:
    conn = sqlite3.connect(db)
    conn.row_factory = sqlite3.Row
    return [dict(r) for r in conn.execute(sql)]


def single_process_images(studio) -> dict[str, np.ndarray]:
    """The same configurations run by the ordinary in-process compare, with the ranks' one torch thread."""
    from studio.request import build_request
    from studio.sweeps.compare import run_compare

    request = build_request(model="tiny-shapes", prompt=PROMPT, seed=1, steps=2, device="cpu")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        result = run_compare(studio, request, CONFIGS[1:], warmup=0, rounds=1)
    finally:
        torch.set_num_threads(threads)
    return {r.label: np.asarray(Image.open(r.image_paths[0])) for r in result.results}


@pytest.mark.slow
def test_compare_spread_over_two_processes_is_logged_once_with_the_same_images(tmp_path, studio):
    db = tmp_path / "dist" / "runs.db"
    config_args = [a for c in CONFIGS[1:] for a in ("--config", c)]
    proc = launch(
        ["torch.distributed.run", "--standalone", "--nproc_per_node", "2"],
        "compare",
        *REQUEST,
        *config_args,
        "--rounds",
        "1",
        "--warmup",
        "0",
        "--db",
        str(db),
        "--json",
        home=tmp_path / "dist",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)  # only the main process prints
    assert [r["config"] for r in out["rows"]] == CONFIGS and all(r["status"] == "ok" for r in out["rows"])
    assert "compare only when their devices are alike" in out["note"]

    groups = rows(db, "select * from groups")
    assert len(groups) == 1 and groups[0]["status"] == "ok" and groups[0]["kind"] == "compare"
    runs = rows(db, "select * from runs order by id")
    assert sorted(r["config_label"] for r in runs) == sorted(CONFIGS), "every configuration exactly once"
    assert all(
        r["status"] == "ok" and r["group_id"] == groups[0]["id"] and Path(r["image_path"]).is_file()
        for r in runs
    )
    where = {r["config_label"]: json.loads(r["stats"])["distributed"] for r in runs}
    assert {w["rank"] for w in where.values()} == {0, 1}, "both processes did work"
    assert all(
        w["world_size"] == 2 and w["backend"] == "gloo" and w["torch_threads"] >= 1 for w in where.values()
    )
    by_label = {r["config_label"]: r for r in runs}
    assert (
        by_label["baseline"]["psnr"] is None
        and by_label["channels_last"]["baseline_run_id"] == by_label["baseline"]["id"]
    )

    reference = single_process_images(studio)
    for label, image in reference.items():
        spread = np.asarray(Image.open(by_label[label]["image_path"]))
        assert np.array_equal(spread, image), (
            f"{label}: the distributed image differs from the single-process one"
        )


@pytest.mark.slow
def test_bad_input_stops_every_process_with_the_reason_and_writes_nothing(tmp_path):
    launcher = [
        "accelerate.commands.launch",
        "--multi_gpu",
        "--num_processes",
        "2",
        "--num_machines",
        "1",
        "--mixed_precision",
        "no",
        "--dynamo_backend",
        "no",
        "--main_process_port",
        free_port(),
    ]
    proc = launch(
        launcher, "compare", *REQUEST, "--config", "channels_last", "--config", "warp", home=tmp_path
    )
    assert proc.returncode != 0
    assert proc.stderr.count("error: Unknown optimization 'warp'") == 2, proc.stderr[-3000:]
    assert "exitcode  : 2" in proc.stderr or "exit status 2" in proc.stderr, proc.stderr[-3000:]
    assert not list(tmp_path.iterdir()), "validation must happen before the run log or any image is written"


@pytest.fixture
def one_process(monkeypatch, tmp_path):
    """`studio.distributed.main` in this process: a world of one; torch threads and Accelerate's state
    restored."""
    from accelerate import PartialState

    from studio import distributed

    monkeypatch.setenv("STUDIO_HOME", str(tmp_path))
    threads = torch.get_num_threads()
    yield distributed
    torch.set_num_threads(threads)
    PartialState._reset_state()


def _fail_on(monkeypatch, label: str) -> None:
    from studio import engine
    from studio.errors import RunFailed

    real = engine.compute_run

    def compute(manager, request, *args, **kwargs):
        if request.config_label == label:
            raise RunFailed("Out of memory on cpu (injected). Try a memory technique.")
        return real(manager, request, *args, **kwargs)

    monkeypatch.setattr(engine, "compute_run", compute)


@pytest.mark.parametrize(
    "failing, code, group_status", [("channels_last", 0, "ok"), ("baseline", 2, "failed")]
)
def test_a_configuration_that_fails_on_its_process_is_logged_as_failed(
    one_process, monkeypatch, tmp_path, capsys, failing, code, group_status
):
    _fail_on(monkeypatch, failing)
    argv = ["compare", *REQUEST, "--config", "channels_last", "--rounds", "1", "--warmup", "0", "--json"]
    assert one_process.main(argv) == code
    out = json.loads(capsys.readouterr().out)
    row = {r["config"]: r for r in out["rows"]}
    assert row[failing]["status"] == "failed" and "injected" in row[failing]["error"]
    runs = {r["config_label"]: r for r in rows(tmp_path / "runs.db", "select * from runs")}
    assert runs[failing]["status"] == "failed" and "injected" in runs[failing]["error"]
    other = next(label for label in runs if label != failing)
    assert runs[other]["status"] == "ok" and Path(runs[other]["image_path"]).is_file()
    assert rows(tmp_path / "runs.db", "select status from groups") == [{"status": group_status}]
