"""`python -m studio cards` in-process: the suite's tiny-shapes model with configurations given, one
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


def test_cards_writes_a_card_and_the_machines_table_shows_it(cli, tmp_path):
    out = tmp_path / "cards"
    status, stdout, stderr = cli(
        "cards",
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
    status, stdout, _ = cli("cards", "--machines", str(out), "--json")
    tables = json.loads(stdout)["tables"]
    mine = [r for r in tables["tiny-shapes"] if r["this_machine"]]
    assert len(mine) == 1 and mine[0]["seconds_per_image"] == entry["baseline"]["seconds_per_image"]
    assert len(tables["sd15-arch"]) == 6, "the project's own cards (docs/cards) come along"
    status, stdout, _ = cli("cards", "--machines", str(out))
    assert status == 0 and "## tiny-shapes" in stdout and "**(this machine)**" in stdout


def test_a_cancelled_run_writes_no_card(cli, tmp_path, monkeypatch):
    import studio.cards.run_suite as runner

    def cancelled(*args, **kw):
        raise Cancelled("Cancelled by the test.")

    monkeypatch.setattr(runner, "run_compare", cancelled)
    out = tmp_path / "cards"
    status, stdout, stderr = cli("cards", "--configs", "channels_last", "--rounds", "1", "--out", str(out))
    assert status == 2 and stdout == "" and "Cancelled by the test." in stderr
    assert not out.exists() or list(out.iterdir()) == []


def test_a_configuration_that_cannot_run_here_is_refused_before_anything_runs(cli, tmp_path):
    status, stdout, stderr = cli("cards", "--configs", "fp16", "--out", str(tmp_path / "cards"))
    assert status == 2 and "fp16 needs a GPU" in stderr and not (tmp_path / "cards").exists()


def test_cards_help_loads_no_model_library():
    from benchmarks.cli_startup import PROBE

    probe = subprocess.run(
        [sys.executable, "-c", PROBE, "cards", "--help"], cwd=ROOT, capture_output=True, text=True
    )
    assert "--budget-s" in probe.stdout and probe.stderr.strip().splitlines()[-1] == "False"


def old_card(system: dict, seconds: float) -> dict:
    """A card of this machine from an earlier studio (torch 2.0.0): tiny-shapes at `seconds` per image,
    the baseline and channels_last each with a 0.01 s range."""
    from studio.cards.suite import SUITE_VERSION

    rows = [
        {"config": c, "status": "ok", "seconds_per_image": seconds, "latency_spread_s": 0.01, "rounds": 3}
        for c in ("baseline", "channels_last")
    ]
    entry = {"model": "tiny-shapes", "width": 64, "height": 64, "steps": 20, "guidance": 6.0, "batch": 1}
    entry.update(device="cpu", rows=rows, host={"busy": False, "busy_pct": 0.5, "steal_pct": 0.0})
    system = {**system, "versions": {**system["versions"], "torch": "2.0.0"}}
    return {
        "schema": 1,
        "suite": SUITE_VERSION,
        "created_at": "2026-01-01T00:00:00Z",
        "system": system,
        "source": "measured with `python -m studio cards`",
        "device": "cpu",
        "models": [entry],
    }


def test_against_compares_the_new_card_with_this_machines_newest(cli, tmp_path):
    from studio.cards.machine import snapshot

    out = tmp_path / "cards"
    out.mkdir()
    (out / "old.json").write_text(json.dumps(old_card(snapshot(), seconds=100.0)))
    quick = ("--models", "tiny-shapes", "--configs", "channels_last", "--rounds", "2", "--out", str(out))
    status, stdout, stderr = cli("cards", *quick, "--against", "--json")
    assert status == 0, stderr
    data = json.loads(stdout)
    report = data["regression"]
    assert report["before"]["card"] == "old.json" and report["after"]["path"] == data["files"]["card"]
    assert {r["config"]: r["verdict"] for r in report["rows"]} == {
        "baseline": "faster",
        "channels_last": "faster",
    }
    assert [v["library"] for v in report["versions"] if v["changed"]] == ["torch"]
    assert len(list(out.glob("*.json"))) == 2, "the new card is written as usual"


def test_against_a_card_of_another_machine_is_refused_before_measuring(cli, tmp_path):
    out = tmp_path / "cards"
    other = ROOT / "docs" / "cards" / "amd-epyc-zen4.json"
    status, stdout, stderr = cli(
        "cards", "--configs", "channels_last", "--out", str(out), "--against", str(other)
    )
    assert status == 2 and stdout == "" and "measured different machines" in stderr
    status, _, stderr = cli("cards", "--configs", "channels_last", "--out", str(out), "--against")
    assert status == 2 and "No card of this machine in" in stderr
    assert not out.exists() or list(out.iterdir()) == []
