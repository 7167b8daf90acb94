"""Records as the pages show them (`studio.ui.views`): a sweep's headline names each point with its X value
and says what its figures are, a table's cells break where a narrow column needs without changing the values
clients read, Generate's card shows the run's own memory and says when a model draws noise by design, and a
bad History date is one sentence."""

from __future__ import annotations

import gradio as gr
import pandas as pd

from pipelines.registry import SPECS
from studio import report
from studio.ui import views
from studio.ui.handlers.generate import model_note
from studio.ui.handlers.history import build_history_handlers
from tests.report.test_records import record


def test_an_xy_headline_names_each_faster_point_with_its_x():
    records = [
        record("baseline", 1.0, verdict="baseline", axis="steps", x="2"),
        record("baseline", 2.0, verdict="baseline", axis="steps", x="4"),
        record("deepcache[interval=2]", 0.5, 2.0, "faster", axis="steps", x="2"),
        record("deepcache[interval=2]", 1.0, 2.0, "faster", axis="steps", x="4"),
    ]
    text = views.headline(records)
    assert "1 configuration, each at 2 steps values," in text
    assert "**deepcache[interval=2] at steps=2, deepcache[interval=2] at steps=4**" in text
    assert "interleaved rounds against the baseline (3 rounds)" in text
    assert "not the ratio of the two latencies" in text


def test_a_contradictory_row_is_explained_under_the_headline():
    records = [record("baseline", 4.59, verdict="baseline"), record("deepcache", 4.76, 0.32, "slower")]
    text = views.headline(records)
    assert "⚠ deepcache: its median latency against the baseline's (4.76 s vs 4.59 s) reads ×0.96" in text


def test_a_styled_table_changes_what_is_shown_not_the_values():
    records = [
        record("baseline", 1.0, verdict="baseline"),
        record("bf16+channels_last", 0.8, 1.25, "faster", memory_kind="cpu_rss"),
    ]
    out = gr.Dataframe(interactive=False).postprocess(views.sweep_table(records))
    assert out.headers[:3] == ["Configuration", "Latency", "Speedup (range), median of 3 rounds"]
    assert out.data[1][0] == "bf16+channels_last", "clients read the configuration as it is"
    assert out.metadata["display_value"][1][0] == "bf16+\u200bchannels_last"
    assert out.metadata["display_value"][1][2] == "×1.25 (1.12\u2060–\u20601.38)"


def test_a_styled_table_shows_missing_values_as_a_dash():
    shown = views.styled(pd.DataFrame({"Run": [1, None], "Configuration": ["a+b", None]}))
    out = gr.Dataframe(interactive=False).postprocess(shown)
    assert out.metadata["display_value"] == [["1", "a+\u200bb"], ["–", "–"]]


def card(**figures):
    m = {
        "fidelity": None,
        "first_call_s": None,
        "batch": 1,
        "latency_s": 0.034,
        "steps_per_s": 59.5,
        "peak_memory_mb": 5361.0,
        "run_memory_mb": 25.0,
        "weights_mb": 13.0,
        "memory_kind": "cpu_rss",
        "applied": [],
        "run_id": 3,
        "device": "cpu",
        "seed": 1,
        "load_s": 0.0,
        **figures,
    }
    return views.generate_card(m, model_note(SPECS[m.pop("model", "tiny-shapes")]))


def test_the_card_shows_the_runs_own_memory_beside_the_process_peak():
    text = card()
    mine = "this run **25 MB** (weights 13 MB + 12 MB during the call)"
    assert f"Memory: {mine} · the process's peak 5,361 MB" in text
    assert "Noise by design" not in text
    assert "this run **–** · the process's peak" in card(run_memory_mb=None)


def test_the_card_says_a_random_weight_model_draws_noise_by_design():
    for model in ("sd15-arch", "sdxl-arch", "flux-arch", "flux-tiny"):
        text = card(model=model)
        assert text.startswith(f"**Noise by design:** {model} has random weights"), model


def test_a_bad_history_date_is_one_sentence_and_the_view_stays(studio):
    history = build_history_handlers(studio)["history_form"]
    refused = history("", "", "", "", "yesterday", 200)
    assert set(refused) == {"note"}, "the table, plot and CSV are left out: the last view stays"
    assert refused["note"].startswith("⚠ Since must be a date or time") and refused["note"].count(". ") == 1
    shown = history("", "", "", "", "2026-01-01", 200)
    assert shown["note"] == "" and isinstance(shown["table"], type(views.styled(pd.DataFrame())))


def test_the_records_keys_are_the_documented_ones():
    assert {"run_memory_mb", "weights_mb"} <= set(report.KEYS)
