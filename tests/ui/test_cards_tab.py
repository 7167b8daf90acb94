"""The Cards tab's endpoints over HTTP (gradio_client against the app as a user runs it): `/cards` writes a
card into the studio's home and answers its summary, bad options are one sentence before anything
runs, `/machines` shows this machine's row beside the project's cards; and a card's winner sent to Generate
the way the tab's **Use in Generate** does runs that same configuration."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import gradio as gr
import pytest
from gradio_client import Client
from gradio_client.exceptions import AppError
from PIL import Image

from studio import devices
from studio.request import parse_config
from studio.runlog import RunLog
from studio.ui.cancel import Cancellations
from studio.ui.handlers import build_handlers
from studio.ui.handlers.cards import machine_labels
from tests.server import ROOT, Server

V0 = ROOT / "tests" / "cards" / "fixtures"  # a folder with a schema-0 card


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    home = tmp_path_factory.mktemp("cards-app")
    srv = Server(home, STUDIO_MODEL_ROOTS=str(home)).start()  # folders of cards: inside the home only
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def client(server):
    return Client(server.url, verbose=False)


@pytest.fixture(scope="module")
def measured(client):
    """/cards on tiny-shapes with one configuration, one round: (summary, sheet, files, card)."""
    args = {"models": ["tiny-shapes"], "configs": "channels_last", "warmup": 0, "rounds": 1, "budget_s": 10}
    return client.predict(**args, api_name="/cards")


def _cards(server) -> list[Path]:
    return sorted((server.home / "cards").glob("*"))


def test_cards_writes_a_card_into_the_studio_home_and_answers_its_summary(measured, server):
    summary, sheet, files, card = measured
    written = dict(line.split(": ", 1) for line in files.splitlines())
    assert set(written) == {"card", "summary", "sheet"}
    assert sorted(Path(p) for p in written.values()) == _cards(server), "the three files, in <home>/cards"
    assert Path(written["summary"]).read_text().strip() == summary.strip()
    assert summary.startswith("# Card: ") and "## tiny-shapes 64x64, 20 steps" in summary
    assert "| `channels_last` |" in summary
    (entry,) = card["models"]
    assert [r["config"] for r in entry["rows"]] == ["baseline", "channels_last"]
    assert card["options"]["configs"] == ["channels_last"] and card["options"]["rounds"] == 1
    assert card["files"]["sheet"] == Path(written["sheet"]).name
    with Image.open(sheet) as shown:
        assert shown.width >= 2 * 192, "the contact sheet: the baseline and the winner side by side"


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"rounds": 0}, "rounds"),
        ({"budget_s": 1}, "budget"),
        ({"models": ["sdxl-arch"]}, "is not in this device's suite of cards"),
        ({"configs": "channels_last\nwarp_drive"}, "warp_drive"),
        ({"device": "cuda:7"}, "cuda:7"),
    ],
)
def test_bad_options_are_one_sentence_before_anything_runs(measured, client, server, kw, message):
    def state():
        return _cards(server), len(RunLog(server.home / "runs.db").runs())

    before = state()
    args = {"models": ["tiny-shapes"], "configs": "", "rounds": 1, "budget_s": 10, **kw}
    with pytest.raises(AppError, match=message):
        client.predict(**args, api_name="/cards")
    assert state() == before, "nothing ran or was written"


def test_machines_shows_this_machines_row_beside_the_projects_and_a_folders(measured, client, server):
    card = measured[3]
    tables, notes, data = client.predict(api_name="/machines")
    mine = [r for r in data["tables"]["tiny-shapes"] if r["this_machine"]]
    baseline = card["models"][0]["baseline"]
    assert len(mine) == 1 and mine[0]["seconds_per_image"] == baseline["seconds_per_image"]
    assert "**(this machine)**" in tables and "## sd15-arch" in tables and "NVIDIA H100" in tables
    assert (notes, data["refused"], data["note"]) == ("", [], None)
    more = server.home / "more"
    more.mkdir()
    shutil.copy(V0 / "card-v0.json", more)
    (more / "notes.json").write_text("{}")
    _, notes, found = client.predict(source=str(more), api_name="/machines")
    assert len(found["tables"]["sd15-arch"]) == len(data["tables"]["sd15-arch"]) + 1, "the folder's card too"
    assert notes.startswith("Not read as cards: 1 file.") and "notes.json is not a card" in notes
    with pytest.raises(AppError, match="nor a dataset repository"):
        client.predict(source="no/such/folder", api_name="/machines")
    with pytest.raises(AppError, match="outside the allowed roots"):
        client.predict(source=str(V0), api_name="/machines")


def test_a_cards_winner_applied_to_generate_runs_the_same_configuration(measured, studio):
    """The card's winner through the tab's Use in Generate handler into Generate's form, then the form's
    Generate: the run log's record of that run has the winner's configuration at the card's shape."""
    card = measured[3]
    (entry,) = card["models"]
    winner = entry["winners"][0]
    handlers = build_handlers(studio, Cancellations())
    (chosen,) = handlers["winners_menu"](card)[0]["choices"]
    form = handlers["use_card_winner"](card, chosen)  # Generate's form, by field name
    assert form.pop("tabs")["selected"] == "generate"
    _, _, metrics = handlers["generate"](**form)
    logged = studio.logged_run(metrics["run_id"])
    assert metrics["config"] == logged["config_label"] == winner["config"]
    assert logged["requested"] == parse_config(winner["config"])[0]
    shape = ("model", "steps", "width", "height", "seed", "prompt", "guidance")
    assert {k: logged[k] for k in shape} == {k: entry[k] for k in shape}


AMX, H100 = "Intel Xeon with AMX", "NVIDIA H100 80GB HBM3"  # machines of docs/cards, as the menu names them


@pytest.fixture
def machines_view(studio, tmp_path, monkeypatch):
    """The Machines view's handlers once it loaded this (empty) studio's cards and the project's:
    (handlers, cards loaded, the winners menu's choices)."""
    monkeypatch.setenv("STUDIO_HOME", str(tmp_path / "home"))
    handlers = build_handlers(studio, Cancellations())
    shown = handlers["machines"]("")
    data, loaded = shown["machines"], shown["cards"]
    assert set(data) == {"tables", "refused", "note"}, "the cards stay out of what /machines answers"
    menu, use = handlers["machines_menu"](loaded)
    assert use["interactive"] and use["value"] == "Use in Generate"
    return handlers, loaded, menu["choices"]


def test_a_winner_of_another_machines_card_fills_generate_at_that_cards_shape(machines_view):
    handlers, loaded, choices = machines_view
    chosen = f"{AMX} — sd15-arch 256x256, 10 steps, guidance 7.5 — changes the image: " + (
        "openvino[inference_precision=auto,mode=hybrid_int8]"
    )
    assert chosen in choices and any(c.startswith(H100) for c in choices), "every machine's winners"
    form = handlers["use_card_winner"](loaded, chosen)
    assert form["tabs"]["selected"] == "generate"
    assert (form["model"], form["steps"], form["width"], form["height"]) == ("sd15-arch", 10, 256, 256)
    assert (form["guidance"], form["prompt"], form["seed"], form["batch"]) == (7.5, "a photo", 1, 1)
    assert form["speed_techniques"] == ["openvino"] and form["precision"] == "fp32"
    settings = {"openvino": {"inference_precision": "auto", "mode": "hybrid_int8"}}
    assert json.loads(form["settings"]) == settings, "the configuration's settings, as the card wrote them"


def test_the_menu_names_a_machine_short_unless_two_would_read_alike():
    named = [{"system": {"name": n}} for n in ("AMD EPYC (a; avx2)", "AMD EPYC (b)", f"{AMX} (c; amx)")]
    assert machine_labels(named) == ["AMD EPYC (a; avx2)", "AMD EPYC (b)", AMX]


def test_a_gpu_winner_on_this_cpu_is_one_sentence_naming_why(machines_view, monkeypatch):
    handlers, loaded, choices = machines_view
    monkeypatch.setattr(devices, "_probe_cuda", lambda: (False, "no CUDA GPU", ()))  # a CPU-only machine
    devices.detect.cache_clear()
    (chosen,) = [c for c in choices if c.startswith(H100) and c.endswith("changes the image: fp16+deepcache")]
    with pytest.raises(gr.Error) as refused:
        handlers["use_card_winner"](loaded, chosen)
    why = "fp16 needs a GPU; this run is on cpu. Remove it or choose another device."
    assert refused.value.message == why, "the request validation's sentence, nothing more"


def test_a_cancelled_run_writes_nothing_and_says_where_it_stopped(studio, tmp_path, monkeypatch):
    """The tab's Cancel, clicked while the run waits in the queue: it stops at its first denoising step, says
    where, and leaves no card."""
    monkeypatch.setenv("STUDIO_HOME", str(tmp_path / "home"))
    cancels = Cancellations()
    handlers = build_handlers(studio, cancels)
    cancels.reserve("api", "cards")  # what the Run click does (a client without a session is "api")
    cancels.cancel("api", "cards")
    shown = handlers["cards"](["tiny-shapes"], "auto", 10, "channels_last", 0, 1)
    said, sheet, files, card = (shown[name] for name in ("summary", "sheet", "files", "card"))
    assert said.startswith("**Cards: Cancelled by the user during round 1 of 1, configuration 1 of 2")
    assert "Nothing was written" in said and (sheet, files, card) == (None, "", None)
    assert not (tmp_path / "home" / "cards").exists()
    assert {r["status"] for r in studio.runlog.runs()} == {"cancelled"}, "its runs are logged cancelled"
