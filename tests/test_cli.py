"""`python -m studio`: same validation and database as the UI; JSON output for scripts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PROMPT = "a big green triangle on the right, on a white background"


def cli(*args: str, home: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "STUDIO_HOME": str(home), "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-m", "studio", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize(
    "args, message",
    [
        # the full list of bad inputs is checked in-process in test_validate.py; these prove the CLI wiring
        (["--opt", "warp"], "Unknown optimization 'warp'"),
        (["--opt", "cudnn_benchmark"], "cudnn_benchmark needs CUDA"),
        (["--width", "60"], "multiple of 8"),
    ],
)
def test_bad_input_exits_non_zero_with_the_reason_and_logs_nothing(tmp_path, args, message):
    proc = cli("generate", "--prompt", PROMPT, *args, home=tmp_path)
    assert proc.returncode == 2
    assert message in proc.stderr and proc.stderr.startswith("error: ")
    assert not (tmp_path / "runs.db").exists(), "validation must happen before the run log is touched"


def test_generate_compare_history_share_one_database(tmp_path):
    gen = cli("generate", "--prompt", PROMPT, "--seed", "1", "--steps", "3", "--opt", "bf16", "--opt", "channels_last",
              "--json", home=tmp_path)
    assert gen.returncode == 0, gen.stderr
    data = json.loads(gen.stdout)
    assert data["applied"] == ["bf16", "channels_last"] and Path(data["image_path"]).is_file()
    cmp_ = cli("compare", "--prompt", PROMPT, "--seed", "1", "--steps", "3", "--config", "baseline",
               "--config", "bf16,channels_last", "--repeats", "2", "--warmup", "0", "--json", home=tmp_path)
    assert cmp_.returncode == 0, cmp_.stderr
    rows = json.loads(cmp_.stdout)["rows"]
    assert [r["config"] for r in rows] == ["baseline", "bf16+channels_last"]
    assert all({"latency_median", "speedup", "peak_memory_mb", "psnr", "image_path", "run_id"} <= set(r) for r in rows)
    hist = cli("history", "--json", home=tmp_path)
    ids = [r["id"] for r in json.loads(hist.stdout)]
    assert data["run_id"] in ids and all(r["run_id"] in ids for r in rows)
    tech = json.loads(cli("history", "--technique", "channels_last", "--json", home=tmp_path).stdout)
    assert {r["config_label"] for r in tech} == {"bf16+channels_last"}


def test_system_and_optimizations(tmp_path):
    system = json.loads(cli("system", "--json", home=tmp_path).stdout)
    assert "cpu" in system["hardware"]["devices"] and system["versions"]["diffusers"]
    opts = {r["name"]: r for r in json.loads(cli("optimizations", "--json", home=tmp_path).stdout)}
    assert opts["bf16"]["unavailable"] is None
    assert "CUDA" in opts["cudnn_benchmark"]["unavailable"]


def test_autotune_prints_the_winner_and_logs_one_group(tmp_path):
    proc = cli("autotune", "--prompt", PROMPT, "--seed", "1", "--steps", "3", "--technique", "channels_last",
               "--technique", "bf16", "--repeats", "1", "--warmup", "0", "--confirm-rounds", "1", "--json", home=tmp_path)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert {r["config"] for r in data["rows"]} >= {"baseline", "channels_last", "bf16"}
    assert set(data["winner"]) <= {"channels_last", "bf16"} and data["summary"]
    runs = json.loads(cli("history", "--json", home=tmp_path).stdout)
    assert len(runs) == len(data["rows"]) + 2 * data["confirmation"]["rounds"]
    bad = cli("autotune", "--prompt", PROMPT, "--min-ssim", "2", home=tmp_path)
    assert bad.returncode == 2 and "min_ssim must be a number from 0 to 1" in bad.stderr
