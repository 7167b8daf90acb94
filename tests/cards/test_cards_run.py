"""The tiny-shapes suite end to end into a card (4 steps, 1 round, configurations given), read back with its
schema checked; its winners are configurations the request accepts and Compare reproduces; writing is all or
nothing; the auto-tuner stops at its budget and the run goes on."""

from __future__ import annotations

import dataclasses
import importlib.util
import json

import pytest
from PIL import Image

from studio import report
from studio.cards import card as card_module
from studio.cards import picks, search
from studio.cards.collection import load_card
from studio.cards.machine import this_fingerprint
from studio.cards.options import Options
from studio.cards.run_suite import run_cards
from studio.cards.suite import CPU_CASES, SUITE_VERSION
from studio.errors import Cancelled
from studio.request import build_request, parse_config, with_config
from studio.sweeps.compare import run_compare

CONFIGS = ("channels_last", "openvino") if importlib.util.find_spec("openvino") else ("channels_last",)
TINY = dataclasses.replace(CPU_CASES[0], steps=4)  # the suite's tiny-shapes case, shortened
OPTIONS = Options(configs=CONFIGS, rounds=1, device="cpu")

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    """One run of the shortened tiny-shapes case, saved: (the run, studio, files)."""
    from studio.engine import Studio

    root = tmp_path_factory.mktemp("cards")
    studio = Studio(db_path=root / "runs.db", outputs=root / "out")
    told: list[tuple[float, str]] = []
    done = run_cards(
        OPTIONS,
        studio=studio,
        cases=[TINY],
        progress=lambda fraction, message: told.append((fraction, message)),
    )
    assert told[-1] == (1.0, "done") and all(0.0 <= f <= 1.0 for f, _ in told)
    return done, studio, card_module.save(done, root / "cards")


def test_the_card_is_written_whole_and_reads_back_in_its_schema(measured):
    done, _, files = measured
    assert sorted(p.name for p in files["card"].parent.iterdir()) == sorted(p.name for p in files.values())
    card = load_card(files["card"])
    assert (card["schema"], card["suite"], card["device"]) == (card_module.SCHEMA, SUITE_VERSION, "cpu")
    assert card["created_at"].endswith("Z") and card["source"] == f"measured with `{OPTIONS.command()}`"
    system = card["system"]
    assert system["fingerprint"] == this_fingerprint() and system["cpu_count"] >= 1
    assert "family" in system["cpu"] or system["cpu_signature"] is None
    assert {"torch", "diffusers", "studio"} <= set(system["versions"])
    (entry,) = card["models"]
    assert (entry["model"], entry["steps"], entry["width"], entry["device"]) == ("tiny-shapes", 4, 64, "cpu")
    assert [r["config"] for r in entry["rows"]] == ["baseline", *CONFIGS]
    for row in entry["rows"]:
        assert set(row) == set(report.KEYS), "the rows are the shared vocabulary's records"
        assert row["status"] == "ok" and row["rounds"] == 1 and row["fidelity"] is not None
        assert row["first_call_s"] is not None and row["steps_per_s"] > 0
    assert entry["baseline"]["config"] == "baseline" and entry["baseline"]["seconds_per_image"] > 0
    assert set(entry["kinds"]) == set(CONFIGS) and set(entry["kinds"].values()) <= set(picks.KINDS)
    assert {w["kind"] for w in entry["winners"]} <= set(picks.KINDS) and entry["winners"]
    assert entry["search"] == {"kind": "configs", "group_id": entry["search"]["group_id"]}
    assert set(entry["host"]) == {"busy", "busy_pct", "steal_pct"} and entry["seconds"] > 0
    assert card["files"] == {"summary": files["summary"].name, "sheet": files["sheet"].name}
    text = files["summary"].read_text()
    assert "## tiny-shapes 64x64, 4 steps" in text and "| `baseline` | baseline |" in text
    with Image.open(files["sheet"]) as sheet:
        assert sheet.format == "PNG" and sheet.width >= 2 * 192
    assert len(done.runs[0].images) == 1 + len(entry["winners"])


def test_a_winning_configuration_is_a_request_and_compare_reproduces_it(measured):
    done, studio, _ = measured
    entry = done.card["models"][0]
    base = build_request(**TINY.fields_on("cpu"))
    for winner in entry["winners"]:
        names, _ = parse_config(winner["config"])
        assert names and with_config(base, winner["config"]).config_label == winner["config"]
        again = run_compare(studio, base, [winner["config"]], warmup=0, rounds=1)
        assert [r["config"] for r in again.records] == ["baseline", winner["config"]]
        assert again.records[1]["status"] == "ok"


@pytest.mark.parametrize("fails", ["summary", "rename"])
def test_a_failure_while_writing_leaves_no_file(measured, tmp_path, monkeypatch, fails):
    done, _, _ = measured
    if fails == "summary":
        monkeypatch.setattr(card_module, "summary", lambda card: (_ for _ in ()).throw(RuntimeError("disk")))
    else:
        real = card_module.os.replace

        def replace(src, dst):
            if str(dst).endswith(".json"):
                raise OSError("disk full")
            return real(src, dst)

        monkeypatch.setattr(card_module.os, "replace", replace)
    with pytest.raises((RuntimeError, OSError)):
        card_module.save(done, tmp_path / "cards")
    assert list((tmp_path / "cards").iterdir()) == []


def test_a_cancelled_run_raises_and_returns_nothing(studio):
    with pytest.raises(Cancelled):
        run_cards(
            Options(configs=("channels_last",), rounds=1, device="cpu"),
            studio=studio,
            cases=[TINY],
            should_stop=lambda: "the test cancels",
        )


def test_the_auto_tuner_stops_at_its_budget_and_says_so(studio):
    request = build_request(model="tiny-shapes", prompt="a red circle", steps=2, width=32, height=32)
    found, about = search.lossy_search(
        studio, request, ("deepcache",), budget_s=0.2, call_s=0.001, warmup=0, rounds=1, keep_db=100.0
    )
    assert about["techniques"] == ["deepcache"] and about["seconds"] >= 0.2
    assert about["summary"].startswith("The auto-tuner ran past its budget of 0.2 s and was stopped")
    assert found == [] or found[0].startswith("deepcache")
    json.dumps(about)  # the card holds it


def test_a_user_cancel_is_not_taken_for_the_budget(studio):
    request = build_request(model="tiny-shapes", prompt="a red circle", steps=2, width=32, height=32)
    with pytest.raises(Cancelled):
        search.lossy_search(
            studio,
            request,
            ("deepcache",),
            budget_s=600,
            call_s=0.001,
            warmup=0,
            rounds=1,
            keep_db=100.0,
            should_stop=lambda: "the user cancels",
        )


def test_a_refused_confirmation_keeps_the_first_compares_rows_and_says_why(studio, monkeypatch):
    """The last Compare can be refused (its copies no longer fit in memory): the card is still written from
    the first Compare, and the search says what was not measured again and why."""
    from studio.cards import run_suite
    from studio.errors import ValidationError

    calls = []

    def compare(*args, **kw):
        calls.append(args[2])
        if len(calls) == 2:
            raise ValidationError("only 1.4 GiB of memory is available.")
        return run_compare(*args, **kw)

    found = {"kind": "autotune", "summary": "Fastest configuration: deepcache[interval=2]."}
    monkeypatch.setattr(run_suite, "run_compare", compare)
    monkeypatch.setattr(run_suite, "lossy_search", lambda *a, **kw: (["deepcache[interval=2]"], dict(found)))
    case = dataclasses.replace(TINY, steps=2, width=32, height=32, keep=("channels_last",))
    request = build_request(**case.fields_on("cpu"))
    run = run_suite.measure_case(studio, case, request, Options(rounds=1, device="cpu"), lambda f, m: None)
    assert calls == [["channels_last"], ["channels_last", "deepcache[interval=2]"]]
    assert [r["config"] for r in run.entry["rows"]] == ["baseline", "channels_last"]
    assert run.entry["search"]["unconfirmed"] == ["deepcache[interval=2]"]
    assert "failed (only 1.4 GiB of memory is available.)" in run.entry["search"]["summary"]
