"""What Compare, Auto-tune, the Ladder and the Cards tab tell a user is true: the boxes ticked at first
are ones likely to pay here, boxes that cannot combine are said as they are ticked, an X/Y headline counts
what is compared with the baseline and names the figure that compares points across its axis, a memory plot
does not make noise look like a difference, an auto-tune winner reaches Generate at the shape it was measured
at, a ladder rung is named for what runs, and the Cards tab says what its budget covers before it starts."""

from __future__ import annotations

import dataclasses

import pandas as pd
import pytest

from studio import devices
from studio.cards import search
from studio.request import build_request
from studio.request.axes import parse_axis
from studio.request.sweep_limits import AutotuneSettings
from studio.sweeps import ladder, xy
from studio.sweeps.compare import run_compare
from studio.ui import views, xy_views
from studio.ui.cancel import Cancellations
from studio.ui.handlers import build_handlers
from studio.ui.handlers.cards import plan_note
from studio.ui.presets import conflicts_note, preselected, presets_for
from studio.ui.xy_views import headline
from tests import tiny

pytestmark = pytest.mark.usefixtures("one_torch_thread")
ON_CPU = not devices.detect().cuda_functional


@pytest.mark.skipif(not ON_CPU, reason="what a CPU ticks")
def test_compare_ticks_no_change_of_precision_on_a_cpu():
    ticked = preselected(presets_for("sd"))
    assert ticked and not any("bf16" in p or "autocast" in p for p in ticked), ticked
    assert not {"classic_attention", "attention_slicing", "torch_compile"} & set(ticked), "none that costs"


def test_boxes_that_cannot_combine_are_said_with_the_registrys_reason():
    assert conflicts_note(["channels_last", "jit_trace_unet"], "") == ""
    note = conflicts_note(["classic_attention", "fused_qkv"], "")
    assert "classic_attention cannot be combined with fused_qkv" in note and "on its own" in note
    typed = conflicts_note([], "channels_last\nbf16,fp16")
    assert "bf16 and fp16 cannot be combined" in typed and "channels_last" not in typed


def test_an_x_axis_headline_counts_what_is_compared_and_says_the_figure_of_its_axis(studio):
    req = tiny.request(steps=2)
    result = xy.run_xy(studio, req, ["cfg_cutoff"], parse_axis("steps", "2,3", req), warmup=0, rounds=2)
    said = headline(result)
    assert said.startswith("**1 configuration** (cfg_cutoff) against the baseline at each of 2 steps values")
    assert "Fastest per denoising step" in said and "per step" in said and "throughput" not in said
    assert "Seconds per step:" in xy.markdown(result) and "Images per second" not in xy.markdown(result)


def test_the_latency_chart_lists_the_configurations_in_the_tables_order(studio):
    """Gradio sorts a bar chart's categories by name; the chart is told the table's order instead."""
    req = tiny.request(steps=2)
    result = xy.run_xy(studio, req, ["vae_slicing"], parse_axis("steps", "3,2", req), warmup=0, rounds=1)
    outputs = xy_views.xy_outputs(result)
    chart = outputs["latency_chart"]
    expected = [f"{p.config} @ steps={p.x}" for p in result.points]
    assert chart["sort"] == expected == list(chart["value"]["configuration"])
    assert expected[0] == "baseline @ steps=3", "the X values keep the order they were given in"
    plain = views.compare_outputs(run_compare(studio, req, ["vae_slicing"], warmup=0, rounds=1))
    assert list(outputs) == list(plain), "a sweep over an axis fills Compare's outputs, in their order"
    assert outputs["xy_results"]["visible"] and not plain["xy_results"]["visible"]


def test_a_memory_spread_below_what_rss_resolves_is_said_not_drawn_as_a_difference():
    points = pd.DataFrame(
        {"config": ["baseline", "a"], "latency_s": [1.0, 0.9], "peak_memory_mb": [700.2, 700.8]}
    )
    rows = [{"memory_kind": "cpu_rss"}]
    plot = views.memory_plot(points, rows)
    assert plot["title"] == "Peak memory: the same within the 16 MB RSS resolves (700–701 MB)"
    assert plot["y_lim"][0] == 0 and plot["y_lim"][1] > 700.8, "from zero, every point inside"
    points["peak_memory_mb"] = [700.0, 900.0]
    assert "the same within" not in views.memory_plot(points, rows)["title"]


def test_an_auto_tune_winner_reaches_generate_at_the_steps_and_size_it_was_measured_at(studio):
    apply = build_handlers(studio, Cancellations())["apply_winner"]
    winner = {"techniques": ["channels_last"], "settings": {}, "steps": 12, "width": 256, "height": 256}
    filled = apply({**winner, "batch": 1})
    assert (filled["steps"], filled["width"], filled["height"], filled["batch"]) == (12, 256, 256, 1)
    assert filled["speed_techniques"] == ["channels_last"] and filled["precision"] == "fp32"


@pytest.mark.parametrize("bf16_instructions", [True, False])
def test_the_ladder_names_a_rung_for_what_runs_and_leaves_out_emulated_bf16(monkeypatch, bf16_instructions):
    """A CPU runs bf16 in fp16's place where it computes bf16 itself; where it would emulate it (many times
    slower than fp32), the bf16 rungs (autocast is bf16 on a CPU) are skipped with that reason and the later
    rungs run without them."""
    real = devices.detect()
    flags = real.cpu_flags - {"avx512_bf16", "amx_bf16"} | ({"amx_bf16"} if bf16_instructions else set())
    monkeypatch.setattr(devices, "detect", lambda: dataclasses.replace(real, cpu_flags=frozenset(flags)))
    steps = {s.rung.label: s for s in ladder.plan(tiny.request(steps=2, device="cpu"))}
    if bf16_instructions:
        assert steps["fp16"].label == "bf16 in place of fp16" and "bf16" in steps["fp16"].optimizations
        assert not steps["autocast"].skipped and "autocast" in steps["channels last"].optimizations
        return
    for rung in ("autocast", "fp16"):
        assert steps[rung].skipped and "this CPU has no bf16 instructions" in steps[rung].note, rung
    later = [s for s in steps.values() if not s.skipped]
    assert later and not any({"bf16", "autocast"} & set(s.optimizations) for s in later)


def test_auto_tune_options_are_built_by_name_and_checked():
    given = {"min_psnr": "25", "rounds": "2", "techniques": "channels_last,cfg_cutoff"}
    settings = AutotuneSettings.of(given)
    assert (settings.floor.min_psnr, settings.rounds, settings.techniques) == (
        25.0,
        2,
        ("channels_last", "cfg_cutoff"),
    )
    with pytest.raises(TypeError):
        AutotuneSettings(30, 0.95)  # by name only
    face = {"rounds": "2", "techniques": ["channels_last"], "warmup": None, "prompt": "not a setting"}
    from_face = AutotuneSettings.of(face)  # what the CLI's namespace, a handler's or a tool's arguments hold
    assert (from_face.rounds, from_face.techniques, from_face.warmup) == (2, ("channels_last",), 1)


def test_the_cards_tab_says_what_its_budget_covers_and_what_the_run_takes_before_it_starts(studio):
    said = plan_note(
        studio, models=["tiny-shapes"], device="cpu", budget_s=60, configs="", warmup=1, rounds=3
    )
    assert "covers the first calls" in said and "Expected: about " in said
    if "first calls of" not in said:  # known (a card measured them): they fill a 60 s budget
        assert "the first calls alone fill the budget" in said
    given = plan_note(studio, models=["tiny-shapes"], device="cpu", budget_s=60, configs="channels_last")
    assert "no budget applies" in given
    assert plan_note(studio, models=["tiny-shapes"], budget_s=1).startswith("⚠ The auto-tuner's budget")


def test_the_fixed_configurations_first_calls_count_against_the_search_budget(studio):
    request = build_request(model="tiny-shapes", prompt="a red circle", steps=2, width=32, height=32)
    found, about = search.lossy_search(
        studio,
        request,
        ("deepcache",),
        budget_s=60,
        spent_s=61,
        call_s=0.001,
        warmup=0,
        rounds=1,
        keep_db=100.0,
    )
    assert found == [] and about["techniques"] == [] and about["first_calls_s"] == 61
    assert "after the fixed configurations' first calls (61 s): nothing searched" in about["summary"]
