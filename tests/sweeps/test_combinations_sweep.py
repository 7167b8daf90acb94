"""What combines with what, planned before anything runs: the pairs in registry order, refusals with the
registry's reason, the estimate and its limit, techniques with a long first call left out with why, the cap;
and how a sweep's records become cells (the real run is tests/test_cli_combinations.py's)."""

from __future__ import annotations

import itertools

import pytest

from studio.errors import ValidationError
from studio.optimizations import REGISTRY, conflicts_of
from studio.request import build_request
from studio.sweeps import combinations, combinations_report
from studio.sweeps.combinations import plan_combinations, prepares

PROMPT = "a big red circle on the left, on a white background"


@pytest.fixture
def request_():
    return build_request(model="tiny-shapes", prompt=PROMPT, steps=2, width=32, height=32, device="cpu")


def by_pair(plan) -> dict[tuple[str, str], combinations.Cell]:
    return {(c.row, c.column): c for c in plan.cells}


def test_three_techniques_make_three_cells_alone_and_three_pairs_in_registry_order(request_):
    plan = plan_combinations(request_, ["deepcache", "sdpa", "channels_last"], rounds=1)
    assert plan.techniques == ("sdpa", "deepcache", "channels_last")  # the registry's order, not the user's
    assert [(c.row, c.column) for c in plan.cells] == [
        ("sdpa", "sdpa"),
        ("deepcache", "deepcache"),
        ("channels_last", "channels_last"),
        ("sdpa", "deepcache"),
        ("sdpa", "channels_last"),
        ("deepcache", "channels_last"),
    ]
    assert plan.cells[-1].config == "channels_last+deepcache", "labelled as Compare labels it: apply order"
    assert {c.outcome for c in plan.cells} == {"planned"}
    assert all(c.request.optimizations for c in plan.cells), "each cell carries its checked request"
    assert plan.request.optimizations == (), "the baseline runs no technique"


def test_a_declared_conflict_is_refused_with_the_registrys_sentence_and_who_declares_it(request_):
    cell = by_pair(plan_combinations(request_, ["classic_attention", "sdpa", "deepcache"]))[
        "classic_attention", "sdpa"
    ]
    assert (cell.outcome, cell.kind, cell.text()) == ("refused", "conflict", "refused: conflict")
    assert cell.reason.startswith("classic_attention and sdpa cannot be combined")
    assert "declared by classic_attention and sdpa" in cell.reason
    traced = by_pair(plan_combinations(request_, ["deepcache", "jit_trace_unet"]))[
        "deepcache", "jit_trace_unet"
    ]
    assert (
        "declared by deepcache" in traced.reason and "jit_trace_unet and" not in traced.reason.split("(")[1]
    )


def test_a_technique_that_cannot_run_here_is_refused_with_its_requirement(request_):
    cells = by_pair(plan_combinations(request_, ["sdpa", "deepcache", "fp8"]))
    for pair in (("fp8", "fp8"), ("deepcache", "fp8"), ("sdpa", "fp8")):
        assert cells[pair].outcome == "refused" and cells[pair].kind == "not here", pair
        assert "fp8 needs CUDA" in cells[pair].reason
    assert cells["sdpa", "deepcache"].outcome == "planned"


def test_every_speed_and_precision_technique_that_runs_here_is_paired_and_the_rest_say_why(request_):
    plan = plan_combinations(request_, include_compile="yes", rounds=1)
    groups = {REGISTRY[n].group for n in plan.techniques}
    assert groups == {"speed", "precision"}
    assert {"sdpa", "deepcache", "int8_dynamic", "bf16"} <= set(plan.techniques)
    assert "fp8 needs CUDA" in plan.left_out["fp8"] and "xformers" in plan.left_out
    assert not set(plan.left_out) & set(plan.techniques)
    n = len(plan.techniques)
    assert len(plan.cells) == n * (n + 1) // 2
    cells = by_pair(plan)
    for a, b in itertools.combinations(plan.techniques, 2):  # refused exactly where the registry says
        assert (cells[a, b].outcome == "refused") == (b in conflicts_of(a)), (a, b, cells[a, b].reason)


def test_the_cap_measures_the_first_cells_and_says_why_the_others_are_not(request_):
    plan = plan_combinations(request_, ["sdpa", "deepcache", "channels_last"], max_cells=4)
    outcomes = [c.outcome for c in plan.cells]
    assert outcomes == ["planned"] * 4 + ["left out"] * 2, "each technique alone first, then the pairs"
    assert all("max_cells" in c.reason for c in plan.cells[4:])
    assert (
        "deepcache + channels_last: left out: over the cap of 4"
        in combinations_report.reasons(combinations.CombinationsResult(plan, plan.cells, None, None))[-1]
    )


def test_combinations_over_the_limit_are_refused_before_they_run_with_the_sentence(request_, monkeypatch):
    monkeypatch.setenv("STUDIO_MAX_REQUEST_S", "60")
    with pytest.raises(ValidationError, match=r"would take about \d+ min .*STUDIO_MAX_REQUEST_S.*max_cells"):
        plan_combinations(request_, ["torch_compile", "aot_package", "sdpa", "deepcache"])  # named: always in
    plan = plan_combinations(request_, ["torch_compile", "aot_package", "sdpa"], max_cells=2)
    assert [c.config for c in plan.cells if c.outcome == "planned"] == ["sdpa", "torch_compile"]


def test_of_every_technique_the_long_first_calls_are_left_out_when_the_time_does_not_allow(
    request_, monkeypatch
):
    monkeypatch.setenv("STUDIO_MAX_REQUEST_S", "120")
    plan = plan_combinations(request_, rounds=1)
    dropped = {n: why for n, why in plan.left_out.items() if "first call" in why}
    assert dropped and all(prepares(n) for n in dropped)
    assert all("STUDIO_MAX_REQUEST_S" in why and "include_compile" in why for why in dropped.values())
    assert {"sdpa", "deepcache", "int8_dynamic"} <= set(plan.techniques), "the cheap ones all stay"
    assert plan.estimate_s <= 120
    never = plan_combinations(request_, include_compile="no", rounds=1)
    assert not any(prepares(n) for n in never.techniques)
    assert "include_compile: no" in never.left_out["torch_compile"]


def test_first_calls_this_studio_logged_replace_the_assumed_cost(request_):
    names = ["torch_compile", "sdpa"]
    assumed = plan_combinations(request_, names).estimate_s
    logged = plan_combinations(
        request_, names, known=lambda r: 1.0 if "torch_compile" in r.optimizations else None
    )
    assert logged.estimate_s < assumed - 2 * combinations.PREPARE_SETUPS  # two compiling cells, 1 s each now


@pytest.mark.parametrize(
    ("techniques", "options", "match"),
    [
        (["sdpa"], {}, "at least two techniques"),
        (["sdpa", "warp_drive"], {}, "Unknown optimization 'warp_drive'"),
        (["sdpa", "deepcache"], {"include_compile": "maybe"}, "include_compile must be one of auto, yes, no"),
        (["sdpa", "deepcache"], {"rounds": 0}, "rounds"),
        (["sdpa", "deepcache"], {"max_cells": -1}, "max_cells"),
    ],
)
def test_what_cannot_be_planned_is_refused_with_a_sentence(request_, techniques, options, match):
    with pytest.raises(ValidationError, match=match):
        plan_combinations(request_, techniques, **options)


def test_records_become_measured_failed_and_refused_cells(request_, monkeypatch):
    """A sweep's records (as Compare gives them) in the cells: figures, the error's type, refusals kept."""
    plan = plan_combinations(request_, ["classic_attention", "sdpa", "deepcache"], rounds=1)
    records = {
        "baseline": {"config": "baseline", "status": "ok", "verdict": "baseline", "latency_s": 0.03},
        "classic_attention": {"status": "ok", "speedup": 1.42, "verdict": "faster", "psnr_db": 38.04},
        "sdpa": {"status": "ok", "speedup": 1.01, "verdict": "within noise", "psnr_db": None, "ssim": 1.0},
        "deepcache": {"status": "failed", "error": "RuntimeError: shapes do not match"},
        "classic_attention+deepcache": {"status": "ok", "speedup": 0.7, "verdict": "slower", "psnr_db": 22.0},
        "sdpa+deepcache": {"status": "cancelled", "error": "the sweep stopped before its first round"},
    }

    class Sweep:
        group_id = 7

    def fake_sweep(studio, kind, entries, **options):
        assert kind == "combinations" and options["max_configs"] is None and options["rounds"] == 1
        assert [e.label for e in entries] == list(records), "one baseline, then every planned cell"
        return Sweep()

    monkeypatch.setattr(combinations, "run_sweep", fake_sweep)
    monkeypatch.setattr(combinations, "records_of", lambda sweep: list(records.values()))
    result = combinations.run_combinations(None, plan)
    assert combinations_report.grid(result) == [
        ["×1.42 / 38.0 dB", "refused: conflict", "×0.70 / 22.0 dB"],
        ["", "≈1.01 / identical", "cancelled"],
        ["", "", "failed: RuntimeError"],
    ]
    why = combinations_report.reasons(result)
    assert "deepcache: failed: RuntimeError: shapes do not match" in why
    assert any(
        line.startswith("classic_attention + sdpa: refused: classic_attention and sdpa") for line in why
    )
    data = combinations_report.as_json(result)
    assert data["group_id"] == 7 and data["baseline"]["latency_s"] == 0.03
    assert {c["config"]: c["outcome"] for c in data["cells"]}["deepcache"] == "failed"
    assert "3 techniques on tiny-shapes (cpu)" in combinations_report.headline(result)


@pytest.mark.parametrize("other", ["int8_static", "openvino"])
def test_int8_weight_only_is_refused_where_the_combinations_saw_it_fail(request_, other):
    """Measured, int8_weight_only + int8_static failed ("to_5 is not an aten linear operator": int8_static's
    prepare met torchao's int8 tensors) and int8_weight_only + openvino failed (torchao's Int8Tensor has no
    aten.view for OpenVINO's trace): the registry now refuses both before anything runs, as it refuses
    int8_dynamic with them."""
    cell = by_pair(plan_combinations(request_, ["int8_weight_only", other]))["int8_weight_only", other]
    assert (cell.outcome, cell.kind) == ("refused", "conflict")
    assert "cannot be combined" in cell.reason
