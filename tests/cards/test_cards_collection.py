"""Cards read back: a schema-0 card is migrated, a newer one refused with a sentence naming its version, a
folder gives one table per model across machines with this machine marked."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import pytest

from studio import report
from studio.cards import collection
from studio.cards.card import SCHEMA
from studio.cards.doc_table import CARDS
from studio.cards.machine import fingerprint, this_fingerprint
from studio.cards.picks import CHANGES, KEEPS
from studio.errors import ValidationError

V0 = Path(__file__).parent / "fixtures" / "card-v0.json"


def test_a_schema_0_card_is_migrated():
    card = collection.load_card(V0)
    assert card["schema"] == SCHEMA and card["created_at"] == "2026-10-01"
    assert card["source"].startswith("migrated from a schema-0 card (the card's first draft)")
    system = card["system"]
    assert (system["cpu"], system["cpu_count"], system["versions"]) == (
        "AMD EPYC (family 25 model 1)",
        2,
        {"torch": "2.13.0"},
    )
    assert (
        system["fingerprint"] == fingerprint(system)
        and system["name"] == "AMD EPYC Zen 3 (family 25 model 1), 2 cores"
    )
    (entry,) = card["models"]
    assert (entry["model"], entry["width"], entry["height"], entry["steps"]) == ("sd15-arch", 256, 256, 10)
    assert entry["baseline"]["seconds_per_image"] == 45.81
    keep, lossy = entry["winners"]
    assert (keep["kind"], keep["config"], keep["seconds_per_image"], keep["psnr_db"]) == (
        KEEPS,
        "openvino[winograd=true]",
        21.12,
        116.8,
    )
    assert (lossy["kind"], lossy["config"], lossy["speedup"]) == (CHANGES, "openvino[mode=full_int8]", 2.25)
    assert all(set(row) == set(report.KEYS) for row in entry["rows"])
    assert lossy["verdict"] is None, "what the old card did not record stays null"


@pytest.mark.parametrize(
    "content, message",
    [
        ({"schema": 99, "models": []}, "is a card of schema version 99; this studio reads versions up to 1"),
        ({"version": -1}, "schema version -1, which no migration reads"),
        ({"models": []}, "names no schema version"),
        ([1, 2], "holds no JSON object"),
        ({"schema": 1, "models": "x", "system": {}}, "without its system or models"),
    ],
)
def test_a_card_this_studio_cannot_read_is_refused_with_a_sentence(tmp_path, content, message):
    path = tmp_path / "card.json"
    path.write_text(json.dumps(content))
    with pytest.raises(ValidationError, match=message.replace("(", r"\(")):
        collection.load_card(path)


def test_a_folder_loads_what_it_can_and_names_what_it_cannot(tmp_path):
    shutil.copy(V0, tmp_path / "old.json")
    (tmp_path / "new.json").write_text(json.dumps({"schema": 7}))
    (tmp_path / "broken.json").write_text("{not json")
    (tmp_path / "notes.txt").write_text("not a card")
    loaded = collection.load_folder(tmp_path, tmp_path / "missing")
    assert [Path(c["path"]).name for c in loaded.cards] == ["old.json"]
    assert len(loaded.refused) == 2
    assert any("schema version 7" in r for r in loaded.refused)
    assert any("broken.json is not valid JSON" in r for r in loaded.refused)


def this_machines_card() -> dict:
    """One of the docs' cards, its machine replaced by this one."""
    card = copy.deepcopy(next(c for c in collection.load_folder(CARDS).cards if c["device"] == "cpu"))
    card["system"].update(name="this machine's CPU", fingerprint=this_fingerprint())
    return card


def test_one_table_per_model_across_machines_with_this_machine_marked():
    loaded = collection.load_folder(CARDS)
    assert not loaded.refused and len(loaded.cards) == 6
    tables = collection.machine_tables([*loaded.cards, this_machines_card()], this_fingerprint())
    assert set(tables) == {"sd15-arch", "sdxl-arch", "tiny-shapes"}
    sd15 = tables["sd15-arch"]
    assert len(sd15) == 7 and [r["this_machine"] for r in sd15].count(True) == 1
    seconds = [r["seconds_per_image"] for r in sd15 if r["shape"].startswith("sd15-arch 256x256")]
    assert seconds == sorted(seconds) and sd15[-1]["device"].startswith("NVIDIA H100"), "by shape, then speed"
    amx = next(r for r in sd15 if r["device"].startswith("Intel Xeon with AMX (family 6 model 167;"))
    assert amx[KEEPS] == "`openvino`: 16.96 s, ×1.49 (1.48–1.56), 124.4 dB"
    assert amx[CHANGES].startswith(
        "`openvino[inference_precision=auto,mode=hybrid_int8]` (bf16 + hybrid int8)"
    )
    assert amx["steps_per_s"] is None and amx["peak_memory_mb"] is None, "what the document lacks is null"
    text = collection.machines_markdown(tables)
    assert (
        "## sd15-arch" in text and "**(this machine)**" in text and "| device | shape | s / image |" in text
    )
    assert collection.machines_markdown({}) == "_no cards_"


def test_the_docs_cards_say_where_they_come_from():
    for card in collection.load_folder(CARDS).cards:
        assert card["source"].startswith("transcribed from docs/benchmarks.md's recorded runs"), card["path"]
        assert card["system"]["fingerprint"] == fingerprint(card["system"])
        for entry in card["models"]:
            assert entry["commands"], (card["path"], entry["model"])
            assert all(set(row) == set(report.KEYS) for row in entry["rows"])


def test_one_cpu_is_named_one_way_whether_its_card_was_transcribed_or_measured():
    """The Machines view names a card's machine from its recorded fields alone: the docs' Zen 3 card and a
    card measured on a Zen 3 VM read as one CPU (the measured one adds what it recorded: stepping, flags)."""
    zen3 = next(c for c in collection.load_folder(CARDS).cards if c["path"].endswith("amd-epyc-zen3.json"))
    measured = {
        "system": {
            "name": "AMD EPYC 7B13 64-Core Processor (family 25 model 1 stepping 1; avx2), 2 cores",
            "cpu": "AMD EPYC 7B13 64-Core Processor (family 25 model 1 stepping 1; avx2)",
            "cpu_model": "AMD EPYC 7B13 64-Core Processor",
            "cpu_signature": "family 25 model 1 stepping 1",
            "cpu_kernels": ["avx2"],
            "cpu_count": 2,
            "gpus": [],
        }
    }
    assert collection.machine_name(zen3) == "AMD EPYC Zen 3 (family 25 model 1; avx2), 2 cores"
    assert (
        collection.machine_name(measured)
        == "AMD EPYC 7B13 Zen 3 (family 25 model 1 stepping 1; avx2), 2 cores"
    )
    amx = {
        **measured["system"],
        "cpu_model": "Intel(R) Xeon(R) Processor",
        "cpu_kernels": ["avx2", "amx_bf16"],
    }
    amx["cpu_signature"] = "family 6 model 167 stepping 1"
    assert collection.machine_name({"system": amx}).startswith("Intel Xeon with AMX (family 6 model 167")
    names = {r["device"] for rows in collection.machine_tables([zen3]).values() for r in rows}
    assert names == {collection.machine_name(zen3)}, "the tables use the same name"
