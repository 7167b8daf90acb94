"""Did an upgrade make it slower, from the app: `/timeline` over HTTP on runs a real server logged (their
versions rewritten in the run log as if torch had been upgraded between them), and the Cards tab's
"Compare two cards" on cards of the studio's folder."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from gradio_client import Client
from gradio_client.exceptions import AppError

from studio.runlog import RunLog
from studio.ui.cancel import Cancellations
from studio.ui.handlers.cards import build_cards_handlers
from tests.server import ROOT, Server

SMALL = {"prompt": "a red circle", "seed": 1, "steps": 2, "width": 32, "height": 32}
DOCS_CARDS = ROOT / "docs" / "cards"


def upgrade(log: RunLog, run_ids: list[int], torch: str, latencies: list[float], day: str) -> None:
    """Rewrite logged runs as if they had run under another torch, on another day, at other speeds."""
    for i, (run_id, latency) in enumerate(zip(run_ids, latencies, strict=True)):
        row = log.get_run(run_id)
        log.db["runs"].update(
            run_id,
            {
                "versions": json.dumps({**row["versions"], "torch": torch}),
                "created_at": f"{day}T09:0{i}:00+00:00",
                "latency_s": latency,
                "latency_min": latency - 0.01,
                "latency_max": latency + 0.01,
            },
        )


def logged_upgrade(client: Client, home: Path) -> list[int]:
    """Four runs of the baseline at 32x32, 2 steps: two under torch 2.12.0 (0.09 and 0.11 s), then two
    under 2.13.0 that take three times as long."""
    ids = [client.predict(**SMALL, api_name="/generate")[2]["run_id"] for _ in range(4)]
    log = RunLog(home / "runs.db")
    upgrade(log, ids[:2], "2.12.0", [0.09, 0.11], "2026-10-01")
    upgrade(log, ids[2:], "2.13.0", [0.29, 0.31], "2026-11-01")
    return ids


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = Server(tmp_path_factory.mktemp("timeline-app")).start()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def client(server):
    return Client(server.url, verbose=False)


def test_timeline_marks_the_upgrade_and_calls_the_change_beyond_both_spreads_slower(client, server):
    ids = logged_upgrade(client, server.home)
    size = {"steps": 2, "width": 32, "height": 32}

    table, plot, block, eras = client.predict(config="baseline", **size, api_name="/timeline")

    assert [e["runs"] for e in eras] == [ids[:2], ids[2:]]
    assert [(e["versions"]["torch"], e["changed"], e["verdict"]) for e in eras] == [
        ("2.12.0", [], None),
        ("2.13.0", ["torch"], "slower"),
    ]
    assert eras[1]["change_pct"] == 200.0
    rows = table["data"]
    assert [row[-1] for row in rows] == ["–", "slower (+200.0%)"]
    assert "**torch 2.13.0**" in rows[1][3] and "**" not in rows[0][3], "the upgraded library is marked"
    assert [row[1] for row in rows] == [2, 2] and rows[0][2].startswith("2026-10-01")
    points = plot["value"]["data"]
    assert len(points) == 4 and len({p[2] for p in points}) == 2, "each run a point, each era a colour"
    assert "**baseline** on `tiny-shapes`, 32x32, 2 steps, batch 1, cpu" in block
    assert "slower (+200.0%)" in block and "not interleaved" in block


def test_timeline_without_runs_says_what_to_run_and_a_bad_configuration_is_one_sentence(client):
    table, plot, block, eras = client.predict(config="channels_last", steps=2, api_name="/timeline")
    assert eras == [] and block.startswith("No finished run of channels_last on tiny-shapes")
    assert "run it in Generate" in block
    with pytest.raises(AppError, match="warp_drive"):
        client.predict(config="warp_drive", api_name="/timeline")
    with pytest.raises(AppError, match="width"):
        client.predict(config="baseline", width=33.5, api_name="/timeline")


def card_like(source: str, name: str, created_at: str, torch: str, seconds: float, **system) -> dict:
    """A copy of a card of docs/cards, dated, under another torch, each row at `seconds` per image ± 0.1 s
    over five timed calls."""
    card = json.loads((DOCS_CARDS / source).read_text())
    card["created_at"] = created_at
    card["system"] = {**card["system"], "versions": {**card["system"]["versions"], "torch": torch}, **system}
    for entry in card["models"]:
        for row in entry["rows"]:
            row.update(seconds_per_image=seconds, latency_spread_s=0.1, rounds=5)
    return {"name": name, "card": card}


@pytest.fixture
def cards_home(tmp_path, monkeypatch):
    """A studio home whose cards/ holds two cards of one AMD EPYC (before and after torch 2.13), one of an
    NVIDIA H100, and one of the EPYC measured by another suite version."""
    monkeypatch.setenv("STUDIO_HOME", str(tmp_path))
    folder = tmp_path / "cards"
    folder.mkdir()
    for made in (
        card_like("amd-epyc-zen3.json", "epyc-before.json", "2026-10-01T09:00:00Z", "2.12.0", 20.0),
        card_like("amd-epyc-zen3.json", "epyc-after.json", "2026-11-01T09:00:00Z", "2.13.0", 26.0),
        card_like("nvidia-h100.json", "h100.json", "2026-11-02T09:00:00Z", "2.13.0", 1.0),
    ):
        (folder / made["name"]).write_text(json.dumps(made["card"]))
    other_suite = {**json.loads((folder / "epyc-after.json").read_text()), "suite": 9}
    (folder / "epyc-suite-9.json").write_text(json.dumps(other_suite))
    shutil.copy(DOCS_CARDS / "amd-epyc-zen3.json", tmp_path / "not-in-the-folder.json")
    return folder


def test_two_cards_of_one_machine_compare_without_measuring_and_others_are_refused(cards_home, studio):
    handlers = build_cards_handlers(studio, Cancellations())
    before, after = handlers["cards_menus"]()
    assert set(before["choices"]) == {"epyc-before.json", "epyc-after.json", "h100.json", "epyc-suite-9.json"}
    assert "not-in-the-folder.json" not in before["choices"]

    shown = handlers["compare_cards"]("epyc-before.json", "epyc-after.json")

    report = shown["report"]
    assert report.startswith("### Speed before and after: AMD EPYC")
    assert "| **torch** | 2.12.0 | **2.13.0** |" in report and "Changed: torch." in report
    assert "| 20.00 s ±0.10 | 26.00 s ±0.10 | +6.000 s (+30.0%) | **slower** |" in report
    assert shown["block"]["value"] == report and shown["block"]["visible"], "the same report, to copy"

    machines = handlers["compare_cards"]("epyc-before.json", "h100.json")
    assert "measured different machines" in machines["report"] and machines["report"].startswith("⚠")
    assert machines["block"]["visible"] is False and machines["area"]["visible"] is True
    suites = handlers["compare_cards"]("epyc-before.json", "epyc-suite-9.json")
    assert "cards compare only within one suite version" in suites["report"]
    outside = handlers["compare_cards"]("epyc-before.json", "../not-in-the-folder.json")
    assert outside["report"].startswith("⚠ Choose two cards of") and outside["block"]["visible"] is False


def test_the_timeline_plot_keeps_its_first_and_last_runs_inside_the_frame():
    """The time axis has a margin each side: runs on the frame's edges read as cut off. One run alone gets an
    hour each side."""
    import pandas as pd

    from studio.ui.handlers.history import plot_frame

    def frame(*times: str) -> dict:
        when = pd.to_datetime(list(times), utc=True)
        return plot_frame(pd.DataFrame({"time": when, "s / image": [2.0] * len(times)}))

    first, last = (pd.Timestamp(t, tz="UTC").timestamp() for t in ("2026-11-01", "2026-11-11"))  # seconds
    low, high = frame("2026-11-01", "2026-11-05", "2026-11-11")["x_lim"]
    assert low < first and high > last and (first - low) == pytest.approx(0.08 * (last - first))
    low, high = frame("2026-11-01")["x_lim"]
    assert (low, high) == (first - 3600, first + 3600)
    assert frame("2026-11-01")["y_lim"] == [0, pytest.approx(2.3)], "seconds from zero"
