"""Two cards of one machine compared: a change is "slower" or "faster" only beyond both cards' ranges, the
libraries that differ are named, two machines or two suite versions are refused, and the Markdown block
says all of it; `--compare-cards` prints it without measuring."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from studio.cards import collection, regression
from studio.cards.doc_table import CARDS
from studio.cli import main
from studio.errors import ValidationError

BASE, OPENVINO, WINOGRAD = "baseline", "openvino", "openvino[winograd=true]"


def measured(versions: dict[str, str], seconds: dict[str, tuple[float, float]], busy: float) -> dict:
    """The docs' Zen 3 card as if the suite had measured it: its sd15-arch rows at `seconds` (config ->
    seconds per image, spread over 3 timed calls), `versions` over its recorded ones, the host `busy`%."""
    card = copy.deepcopy(
        next(c for c in collection.load_folder(CARDS).cards if c["path"].endswith("zen3.json"))
    )
    card.update(suite=1, source="measured with `python -m studio cards`")
    card["system"]["versions"].update(versions)
    card["models"] = [e for e in card["models"] if e["model"] == "sd15-arch"]
    entry = card["models"][0]
    for row in entry["rows"]:
        row["seconds_per_image"], row["latency_spread_s"] = seconds[row["config"]]
        row.update(latency_s=row["seconds_per_image"], rounds=3, batch=1)
    entry["host"] = {"busy": busy > 10, "busy_pct": busy, "steal_pct": 0.2}
    return card


@pytest.fixture
def cards() -> tuple[dict, dict]:
    """Before: torch 2.12; after: torch 2.13 with the baseline 2 s slower, openvino within its range and
    winograd 4 s faster."""
    old = measured(
        {"torch": "2.12.0", "torchao": "not installed"},
        {BASE: (36.0, 0.8), OPENVINO: (22.0, 1.5), WINOGRAD: (21.0, 0.4)},
        busy=1.0,
    )
    new = measured(
        {"torch": "2.13.0", "torchao": "not installed"},
        {BASE: (38.0, 0.5), OPENVINO: (23.0, 0.6), WINOGRAD: (17.0, 0.3)},
        busy=35.0,
    )
    old["created_at"], new["created_at"] = "2026-10-01T09:00:00Z", "2026-11-01T09:00:00Z"
    return old, new


def test_a_change_is_a_verdict_only_beyond_both_ranges(cards):
    report = regression.compare(*cards)
    verdicts = {r["config"]: (r["change_s"], r["verdict"]) for r in report["rows"]}
    assert verdicts == {BASE: (2.0, "slower"), OPENVINO: (1.0, "within noise"), WINOGRAD: (-4.0, "faster")}
    assert report["counts"] == {"slower": 1, "faster": 1, "within noise": 1, "no range": 0}
    assert report["machine"] == "AMD EPYC Zen 3 (family 25 model 1; avx2), 2 cores"
    changed = [v for v in report["versions"] if v["changed"]]
    assert changed == [{"library": "torch", "before": "2.12.0", "after": "2.13.0", "changed": True}]
    torchao = next(v for v in report["versions"] if v["library"] == "torchao")
    assert torchao["before"] == torchao["after"] == "not installed", "an absent library is listed as absent"
    assert report["after"]["host"]["busy"] and "35%" in report["after"]["host"]["note"]
    assert "measured apart, not in interleaved rounds" in report["caveat"]


def test_without_a_range_there_is_no_verdict(cards):
    old, new = cards
    for row in old["models"][0]["rows"]:
        row["rounds"] = 1  # one timed call: no spread
    assert {r["verdict"] for r in regression.compare(old, new)["rows"]} == {"no range"}


def test_the_markdown_block_carries_the_machine_the_versions_and_the_verdicts(cards):
    text = regression.markdown(regression.compare(*cards))
    assert text.startswith("### Speed before and after: AMD EPYC Zen 3 (family 25 model 1; avx2), 2 cores")
    assert "| **torch** | 2.12.0 | **2.13.0** |" in text and "| diffusers | 0.42.1 | 0.42.1 |" in text
    assert "| torchao | absent | absent |" in text and "Changed: torch." in text
    row = "| sd15-arch 256x256, 10 steps, guidance 7.5 | `baseline` | 36.00 s ±0.80 | 38.00 s ±0.50 |"
    assert f"{row} +2.000 s (+5.6%) | **slower** |" in text
    assert "| `openvino` | 22.00 s ±1.50 | 23.00 s ±0.60 | +1.000 s (+4.5%) | within noise |" in text
    assert "after busy: its figures are unreliable (other processes 35% of the CPU" in text
    assert "not in interleaved rounds" in text and "```" not in text, "one block, pasted as it is"


def test_cards_of_two_machines_or_two_suites_are_refused(cards):
    old, new = cards
    zen4 = next(c for c in collection.load_folder(CARDS).cards if c["path"].endswith("zen4.json"))
    with pytest.raises(ValidationError, match="measured different machines .*AMD EPYC Zen 4"):
        regression.compare(old, {**zen4, "suite": 1})
    with pytest.raises(ValidationError, match="suite version 1 and .* with 2: cards compare only within one"):
        regression.compare(old, {**new, "suite": 2})


def test_compare_cards_prints_the_report_without_measuring(cards, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("STUDIO_HOME", str(tmp_path / "home"))
    paths = [tmp_path / "old.json", tmp_path / "new.json"]
    for path, card in zip(paths, cards, strict=True):
        path.write_text(json.dumps(card))
    assert main(["cards", "--compare-cards", *map(str, paths), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["before"]["card"] == "old.json" and data["counts"]["slower"] == 1
    assert main(["cards", "--compare-cards", *map(str, paths)]) == 0
    assert "**slower**" in capsys.readouterr().out
    other = Path(CARDS) / "intel-xeon-amx.json"
    assert main(["cards", "--compare-cards", str(paths[0]), str(other)]) == 2
    assert "measured different machines" in capsys.readouterr().err
    assert not (tmp_path / "home" / "cards").exists(), "nothing measured, nothing written"


def test_a_card_records_every_library_that_can_change_speed():
    from studio.cards.machine import ABSENT, SPEED_LIBRARIES, snapshot

    versions = snapshot()["versions"]
    assert set(SPEED_LIBRARIES) <= set(versions) and all(versions.values())
    assert versions["torch"] != ABSENT and versions["studio"].startswith("0.")
