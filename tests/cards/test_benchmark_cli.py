"""`python -m studio benchmark` in-process: the suite's tiny-shapes model with configurations given, one
round, into a card; `--machines` prints the cards as tables; `--help` loads no model library."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from studio.cli import main
from studio.errors import Cancelled

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture
def cli(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("STUDIO_HOME", str(tmp_path / "home"))

    def run(*args: str) -> tuple[int, str, str]:
        capsys.readouterr()
        status = main(list(args))
        out, err = capsys.readouterr()
        return status, out, err

    return run


def test_the_benchmark_writes_a_card_and_the_machines_table_shows_it(cli, tmp_path):
    out = tmp_path / "cards"
    status, stdout, stderr = cli(
        "benchmark",
        "--models",
        "tiny-shapes",
        "--configs",
        "channels_last",
        "--rounds",
        "1",
        "--out",
        str(out),
        "--json",
    )
    assert status == 0, stderr
    data = json.loads(stdout)
    assert set(data["files"]) == {"card", "summary", "sheet"} and data["published"] is None
    assert all(Path(p).is_file() for p in data["files"].values())
    (entry,) = data["card"]["models"]
    assert (entry["model"], entry["steps"]) == ("tiny-shapes", 20) and "[100%] done" in stderr
    status, stdout, _ = cli("benchmark", "--machines", str(out), "--json")
    tables = json.loads(stdout)["tables"]
    mine = [r for r in tables["tiny-shapes"] if r["this_machine"]]
    assert len(mine) == 1 and mine[0]["seconds_per_image"] == entry["baseline"]["seconds_per_image"]
    assert len(tables["sd15-arch"]) == 6, "the project's own cards (docs/cards) come along"
    status, stdout, _ = cli("benchmark", "--machines", str(out))
    assert status == 0 and "## tiny-shapes" in stdout and "**(this machine)**" in stdout


def test_a_cancelled_benchmark_writes_no_card(cli, tmp_path, monkeypatch):
    import studio.cards.run_suite as runner

    def cancelled(*args, **kw):
        raise Cancelled("Cancelled by the test.")

    monkeypatch.setattr(runner, "run_compare", cancelled)
    out = tmp_path / "cards"
    status, stdout, stderr = cli(
        "benchmark", "--configs", "channels_last", "--rounds", "1", "--out", str(out)
    )
    assert status == 2 and stdout == "" and "Cancelled by the test." in stderr
    assert not out.exists() or list(out.iterdir()) == []


def test_a_configuration_that_cannot_run_here_is_refused_before_anything_runs(cli, tmp_path):
    status, stdout, stderr = cli("benchmark", "--configs", "fp16", "--out", str(tmp_path / "cards"))
    assert status == 2 and "fp16 needs a GPU" in stderr and not (tmp_path / "cards").exists()


def test_benchmark_help_loads_no_model_library():
    from benchmarks.cli_startup import PROBE

    probe = subprocess.run(
        [sys.executable, "-c", PROBE, "benchmark", "--help"], cwd=ROOT, capture_output=True, text=True
    )
    assert "--budget-s" in probe.stdout and probe.stderr.strip().splitlines()[-1] == "False"
