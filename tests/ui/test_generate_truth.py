"""What Generate, History and Shard say after each action, through their handlers on a real studio:
a combination's first call estimated from its parts, techniques that cannot combine said as they are ticked,
a refused or cancelled run in place of the last run's card, `/estimate` saying what the page says, History's
verdicts only where a sweep gave one and the run it loaded named, a refused sharded save said in place."""

from __future__ import annotations

import re
from types import SimpleNamespace

import gradio as gr
import pandas as pd
import pytest

from studio import report
from studio.errors import ConflictError
from studio.optimizations import check_conflicts
from studio.request import HistoryFilter
from studio.ui import views
from studio.ui.cancel import Cancellations
from studio.ui.handlers.generate import build_generate_handlers, conflicts_note
from studio.ui.handlers.history import build_history_handlers
from studio.ui.handlers.shard_handlers import build_shard_handlers
from tests import tiny
from tests.engine.test_memory_estimate import FITS_WITH_SLICING

FORM = {"model": "tiny-shapes", "custom_model": "", "device": "auto", "prompt": tiny.PROMPT, "steps": 2}
FORM.update(speed_techniques=[], memory_techniques=[], precision_techniques=[], width=64, height=64)


@pytest.fixture
def generate(studio):
    return build_generate_handlers(studio, Cancellations())


def registry_sentence(*names: str) -> str:
    with pytest.raises(ConflictError) as refused:
        check_conflicts(set(names))
    return str(refused.value)


def test_techniques_that_cannot_combine_are_said_with_the_registrys_reason_as_soon_as_ticked():
    assert conflicts_note("bf16", ["openvino"], [], []) == f"⚠ {registry_sentence('bf16', 'openvino')}"
    both = conflicts_note("bf16", ["channels_last", "openvino"], ["vae_slicing"], []).split("  \n")
    assert both == [
        f"⚠ {registry_sentence('bf16', 'openvino')}",
        f"⚠ {registry_sentence('channels_last', 'openvino')}",
    ]
    assert conflicts_note("bf16", ["channels_last"], ["vae_slicing"], []) == "", "these combine"


def test_a_combination_not_run_anywhere_is_estimated_from_its_parts(studio, generate):
    """vae_slicing+openvino: openvino's first call from a machine's card, vae_slicing's from this studio's
    own runs once it has run (its first call costs no more than a later one)."""
    form = {**FORM, "speed_techniques": ["openvino"], "memory_techniques": ["vae_slicing"]}
    before = generate["first_call_note"](**form)
    assert before.startswith("Not run here yet as vae_slicing+openvino. Estimated from its parts")
    assert "openvino costs " in before and "more than a later call (on the card of " in before
    assert "vae_slicing was not measured" in before and before.endswith("not counting vae_slicing.")
    for _ in range(3):
        studio.generate(tiny.request(["vae_slicing"], steps=2))
    after = generate["first_call_note"](**form)
    assert re.search(r"vae_slicing costs ([\d.]+ m?s more|no more) than a later call \(here\)", after), after
    assert "Together: about " in after and "not counting" not in after
    unknown = generate["first_call_note"](
        **{**FORM, "speed_techniques": ["channels_last"], "precision": "bf16"}
    )
    assert unknown.startswith("Not run here yet as bf16+channels_last, and none of its techniques")


def test_estimate_says_what_the_pages_will_it_fit_says(generate, monkeypatch):
    """A batch that would not fit in RAM unless its images are decoded one at a time: `/estimate`'s sentence
    names the fix, as the page does."""
    from studio.engine import memory_estimate

    # 420 MB of room past what the process holds now, whatever it holds (the share kept free counts it too)
    monkeypatch.setattr(
        memory_estimate, "cpu_capacity", lambda now: int((now + 420 * 2**20) / memory_estimate.HEADROOM)
    )
    form = {**FORM, "device": "cpu", "width": 512, "height": 512, "batch": 4}
    answer = generate["estimate"](**form)
    assert answer["fits"] is False and re.search(FITS_WITH_SLICING, answer["sentence"]), answer["sentence"]
    page = generate["estimate_form"](**form)
    sizes = re.compile(r"[\d.]+ [MG]B")  # what the process holds moves by a few MB between two estimates
    said = " ".join(filter(None, [f"⚠ {answer['sentence']}", answer["first_call"]]))
    assert sizes.sub("N", page) == sizes.sub("N", said)


def test_a_refused_run_is_said_in_the_card_instead_of_the_last_runs(generate):
    shown = generate["generate_form"](**{**FORM, "width": 60})
    assert shown["image"] is None and shown["metrics"] is None
    assert shown["card"].startswith("⚠ **Not run:** ") and "multiple of 8" in shown["card"]
    with pytest.raises(gr.Error, match="multiple of 8"):  # the toast too
        generate["refusal_toast"](None)
    generate["refusal_toast"](None)  # said once: the next run's toast is its own


def test_a_cancelled_run_clears_the_last_runs_image(generate):
    assert generate["generate_form"](**FORM)["image"] is not None
    generate["generate_reserve"](None)
    assert generate["generate_cancel"](None) == "Stopping after the current step…"
    shown = generate["generate_form"](**FORM)
    assert shown["image"] is None and shown["card"].startswith("Cancelled after 0 of 2 steps")


def test_history_shows_a_verdict_only_where_a_sweep_gave_one_and_names_the_run_it_loads(studio):
    run = studio.generate(tiny.request(["vae_slicing"], steps=2))
    single = [report.log_record(r) for r in studio.history(HistoryFilter(limit=5))]
    swept = {**single[0], "run_id": single[0]["run_id"] + 1, "verdict": "faster", "speedup": 1.4}
    table = views.history_outputs([swept, *single], "runs.csv", ["a swept prompt", tiny.PROMPT])["table"].data
    assert list(table["Verdict"]) == ["faster", "–"] and list(table["Status"]) == ["ok", "ok"]
    assert list(table["Prompt"]) == ["a swept prompt", tiny.PROMPT]
    history = build_history_handlers(studio)
    picked = pd.DataFrame({"Run": [run.run_id]})
    loaded = history["load_selected"](picked, SimpleNamespace(index=[0, 0]))
    assert loaded["memory_techniques"] == ["vae_slicing"] and loaded["steps"] == 2
    assert loaded["loaded"].startswith(f"Loaded run #{run.run_id} (tiny-shapes, vae_slicing, 20")


def test_a_second_sharded_save_under_a_taken_name_is_refused_in_place(studio, tmp_path, monkeypatch):
    monkeypatch.setenv("STUDIO_HOME", str(tmp_path / "home"))
    shard = build_shard_handlers(studio)["shard_form"]
    first = shard("tiny-shapes", "", "taken", "1MB")
    assert first["note"] == "" and "diffusion_pytorch_model" in " ".join(first["table"]["file"])
    again = shard("tiny-shapes", "", "taken", "1MB")
    assert again["report"] is None and again["table"] is None
    assert again["note"].startswith("⚠ Not saved: ") and "exists and is not empty" in again["note"]
