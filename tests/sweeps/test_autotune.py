"""The auto-tuner: a pruned search that keeps only configurations meeting the quality floor, logged as one
group, and a winner offered only when its confirmation measured it faster beyond noise."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
import torch
from diffusers.models.unets.unet_2d_condition import UNet2DConditionModel, UNet2DConditionOutput

from studio.errors import ValidationError
from studio.optimizations import REGISTRY, Optimization
from studio.request import build_request
from studio.request.quality_floor import Floor
from studio.sweeps.autotune import as_json, markdown, pareto, run_autotune, summary
from studio.sweeps.autotune_search_space import Candidate, candidates

PROMPT = "a big yellow triangle in the centre, on a black background"
ANY_IMAGE = Floor(min_psnr=0, min_ssim=-1, fidelity_drop=1)  # the stubs below draw garbage on purpose


def request(**kw):
    return build_request(
        **{"model": "tiny-shapes", "prompt": PROMPT, "seed": 3, "steps": 4, "width": 32, "height": 32, **kw}
    )


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_nothing_below_the_quality_floor_can_win(studio):
    result = run_autotune(
        studio,
        request(),
        floor=Floor(min_psnr=99.0),
        techniques=["bf16", "deepcache"],
        warmup=0,
        rounds=1,
        confirm_rounds=2,
    )
    rows = {r["config"]: r for r in result.rows}
    deepcache = {"deepcache[interval=2]", "deepcache[interval=3]", "deepcache[interval=5]"}
    assert set(rows) == {"baseline", "bf16"} | deepcache, (
        "each candidate (each grid point) measured once, alone"
    )
    for name in {"bf16"} | deepcache:
        assert (
            rows[name]["status"] == "ok" and not rows[name]["meets_floor"] and "PSNR" in rows[name]["floor"]
        )
        assert rows[name]["stage"] == "single"
    assert result.winner is None and result.confirmation is None
    assert "keep the baseline" in summary(result).lower() and as_json(result)["winner"] is None
    runs = studio.runlog.runs(group_id=result.group_id)
    assert len(runs) == len(rows) and {r["status"] for r in runs} == {"ok"}
    assert studio.runlog.db["groups"].get(result.group_id)["status"] == "ok"


def test_winner_is_confirmed_interleaved_and_only_combines_survivors(studio):
    result = run_autotune(
        studio,
        request(),
        floor=ANY_IMAGE,
        techniques=["channels_last", "bf16"],
        warmup=0,
        rounds=2,
        confirm_rounds=2,
    )
    survivors = {
        r["config"]
        for r in result.rows
        if r["stage"] == "single" and r["meets_floor"] and r["verdict"] == "faster"
    }
    c = result.confirmation
    if result.winner is None:
        assert c is None or c["verdict"] != "faster"
    else:
        assert set(result.winner.optimizations) <= survivors
        assert c["rounds"] == 2 and c["verdict"] == "faster" and c["speedup_min"] > 1.0
        assert c["speedup_min"] <= c["speedup"] <= c["speedup_max"]
        assert result.winner_label == c["config"] and c["config"] in summary(result)
    if survivors:
        assert c is not None and c["stage"] == "confirmation"
    assert result.pareto_quality and result.pareto_memory
    assert studio.runlog.db["groups"].get(result.group_id)["status"] == "ok"


def test_unavailable_or_unknown_techniques_are_refused_before_any_run(studio):
    with pytest.raises(ValidationError, match="xformers"):
        run_autotune(studio, request(), techniques=["xformers"])
    with pytest.raises(ValidationError, match="warp"):
        run_autotune(studio, request(), techniques=["warp"])
    assert studio.runlog.runs() == []


def test_candidates_leave_out_placement_memory_and_compile_by_default():
    names = candidates(request())
    assert "bf16" in names and "channels_last" in names
    slow_or_unhelpful = {
        "model_cpu_offload",
        "vae_tiling",
        "classic_attention",
        "torch_compile",
        "int8_static",
        "xformers",
    }
    assert not slow_or_unhelpful & set(names)
    assert "torch_compile" in candidates(request(), include_compile=True)


def test_pareto_front_keeps_only_undominated_points():
    rows = [
        {"config": c, "status": "ok", "latency_s": lat, "psnr_db": q}
        for c, lat, q in [
            ("baseline", 1.0, float("inf")),
            ("a", 0.5, 40.0),
            ("b", 0.6, 35.0),
            ("c", 0.4, 20.0),
            ("unknown", 0.1, None),
        ]
    ]
    rows.append({"config": "broken", "status": "failed", "latency_s": None, "psnr_db": None})
    assert pareto(rows, "psnr_db", better_high=True) == ["baseline", "a", "c"]
    mem = [
        {"config": c, "status": "ok", "latency_s": lat, "peak_memory_mb": m}
        for c, lat, m in [("baseline", 1.0, 100.0), ("a", 0.5, 120.0), ("b", 0.6, 90.0), ("c", 0.7, 130.0)]
    ]
    assert pareto(mem, "peak_memory_mb", better_high=False) == ["a", "b"]


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"min_ssim": 2}, "min_ssim must be a finite number between -1 and 1"),
        ({"min_psnr": float("nan")}, "min_psnr must be a finite number between 0 and 200"),
        ({"warmup": float("nan")}, "warm-up calls must be a whole number between 0 and 10"),
        ({"rounds": 0}, "rounds must be a whole number between 1 and 50"),
        ({"confirm_rounds": "x"}, "confirmation rounds must be a whole number between 1 and 50"),
    ],
)
def test_autotune_settings_are_checked_at_the_validation_boundary(settings, message):
    from studio.request import AutotuneSettings

    with pytest.raises(ValidationError, match=message):
        AutotuneSettings.of(settings)
    with pytest.raises(TypeError):
        AutotuneSettings(30.0, 0.95)  # by name only: six numbers in a row cannot be told apart


# ---- the confirmation decides: stub techniques whose speed the test chooses --------------------------------

SLEEP_PER_UNET_CALL = 0.04  # slow mode: 4 UNet calls a run, +0.16 s on a ~0.05 s run


def stub(name: str, fast: Callable[[], bool]) -> Optimization:
    """A technique that replaces the UNet's forward: while `fast()` it skips the UNet's work (a zero noise
    prediction: less work, honestly faster); otherwise it runs the real UNet and then sleeps (slower)."""

    def apply(pipe, ctx):
        unet = pipe.unet
        real = type(unet).forward.__get__(unet)

        def forward(sample, *args, return_dict=True, **kwargs):
            if fast():
                out = torch.zeros_like(sample)
                return UNet2DConditionOutput(sample=out) if return_dict else (out,)
            result = real(sample, *args, return_dict=return_dict, **kwargs)
            time.sleep(SLEEP_PER_UNET_CALL)
            return result

        unet.forward = forward  # an instance attribute: nn.Module.__call__ finds it first

    def revert(pipe, ctx):
        pipe.unet.__dict__.pop("forward", None)

    return Optimization(
        name=name, label=name, group="speed", description="test stub", apply=apply, revert=revert
    )


@pytest.fixture
def stub_studio(tmp_path, monkeypatch):
    """Register stubs first, then open the studio: the run log makes a column per registered technique."""
    from studio.engine import Studio

    def make(*stubs: Optimization):
        for opt in stubs:
            monkeypatch.setitem(REGISTRY, opt.name, opt)
        return Studio(db_path=tmp_path / "runs.db", outputs=tmp_path / "out")

    return make


@pytest.fixture
def slow_unet(monkeypatch):
    """The UNet sleeps as a slow technique's does, so a stub that skips it is several times faster: measured
    faster beyond noise on a busy host too (the tests below are about what the search does with it)."""
    unet_forward = UNet2DConditionModel.forward

    def slow_forward(self, *args, **kwargs):
        time.sleep(SLEEP_PER_UNET_CALL)
        return unet_forward(self, *args, **kwargs)

    monkeypatch.setattr(UNet2DConditionModel, "forward", slow_forward)


class Sweeps:
    """A progress callback that counts the auto-tune's sweeps (each one's progress starts at 0)."""

    def __init__(self):
        self.count = 0

    def __call__(self, done: int, total: int, message: str) -> None:
        self.count += done == 0


def test_a_slower_technique_is_never_offered(stub_studio):
    studio = stub_studio(stub("stub_slow", fast=lambda: False))
    result = run_autotune(
        studio, request(), floor=ANY_IMAGE, techniques=["stub_slow"], warmup=1, rounds=3, confirm_rounds=3
    )
    assert [(r["config"], r["stage"]) for r in result.rows] == [
        ("baseline", "baseline"),
        ("stub_slow", "single"),
    ]
    single = result.rows[1]
    assert single["verdict"] == "slower" and single["speedup"] < 1.0, "it did not survive the singles"
    assert result.winner is None and result.confirmation is None
    assert summary(result).startswith("Nothing here beats the baseline beyond noise")
    assert result.winner_label == "baseline" and as_json(result)["winner"] is None
    assert "Nothing here beats the baseline" in markdown(result)


def test_a_technique_fast_in_the_singles_but_slow_in_its_confirmation_is_not_offered(stub_studio, slow_unet):
    sweeps = Sweeps()
    studio = stub_studio(stub("stub_fickle", fast=lambda: sweeps.count <= 1))  # fast in the first sweep only
    result = run_autotune(
        studio,
        request(),
        floor=ANY_IMAGE,
        techniques=["stub_fickle"],
        warmup=1,
        rounds=5,
        confirm_rounds=5,
        progress=sweeps,
    )
    single, confirmed = [r for r in result.rows if r["config"] == "stub_fickle"]
    assert (single["stage"], single["verdict"]) == ("single", "faster"), "it survived the singles"
    assert (confirmed["stage"], confirmed["verdict"]) == ("confirmation", "slower")
    assert sweeps.count == 2, "singles, then the confirmation"
    assert result.winner is None and result.confirmation is confirmed
    text = summary(result)
    assert (
        text.startswith("Nothing here beats the baseline beyond noise")
        and "stub_fickle" in text
        and "slower" in text
    )
    assert as_json(result)["winner"] is None and result.winner_label == "baseline"
    logged = {
        r["verdict"]
        for r in studio.runlog.runs(group_id=result.group_id)
        if r["config_label"] == "stub_fickle"
    }
    assert logged == {"faster", "slower"}


def test_a_technique_that_does_less_work_is_offered_after_its_confirmation(stub_studio, slow_unet):
    studio = stub_studio(stub("stub_fast", fast=lambda: True))
    result = run_autotune(
        studio, request(), floor=ANY_IMAGE, techniques=["stub_fast"], warmup=1, rounds=5, confirm_rounds=5
    )
    assert result.winner == Candidate(("stub_fast",), {})
    c = result.confirmation
    assert c["config"] == "stub_fast" and c["verdict"] == "faster" and c["rounds"] == 5
    assert summary(result).startswith("Fastest configuration that meets the floor: stub_fast")
    assert as_json(result)["winner"] == {"techniques": ["stub_fast"], "settings": {}}


def test_every_stage_runs_warmups_then_interleaved_rounds(stub_studio, monkeypatch, slow_unet):
    """Singles, combinations and the confirmation are each one sweep on the protocol. Two stubs that skip
    the UNet's work survive the singles for sure, so there is a combination and a confirmation; the progress
    callback starts at 0 for each sweep, which splits the recorded `compute` calls into sweeps."""
    studio = stub_studio(stub("stub_fast", fast=lambda: True), stub("stub_fast_too", fast=lambda: True))
    events: list[tuple[str, ...]] = []
    real = studio.compute

    def compute(req, options):
        events.append(("call", req.config_label))
        return real(req, options)

    monkeypatch.setattr(studio, "compute", compute)
    warmup, rounds, confirm = 1, 3, 4
    result = run_autotune(
        studio,
        request(),
        floor=ANY_IMAGE,
        techniques=["channels_last", "sdpa", "stub_fast", "stub_fast_too"],
        warmup=warmup,
        rounds=rounds,
        confirm_rounds=confirm,
        progress=lambda done, total, msg: events.append(("start",) if done == 0 else ("next",)),
    )
    sweeps: list[list[str]] = []
    for event in events:
        if event[0] == "start":
            sweeps.append([])
        elif event[0] == "call":
            sweeps[-1].append(event[1])

    def order(labels: list[str], n: int) -> list[str]:
        return [label for label in labels for _ in range(warmup)] + labels * n

    stages = [r["stage"] for r in result.rows]
    single = [r["config"] for r in result.rows if r["stage"] in ("baseline", "single")]
    combos = [r["config"] for r in result.rows if r["stage"] == "combination"]
    confirmed = [r["config"] for r in result.rows if r["stage"] == "confirmation"]
    assert single == ["baseline", "channels_last", "sdpa", "stub_fast", "stub_fast_too"]
    assert stages.count("combination") >= 2 and len(confirmed) == 1
    expected = [order(single, rounds)]
    expected += [order(["baseline", *combos[i : i + 2]], rounds) for i in range(0, len(combos), 2)]
    expected.append(order(["baseline", *confirmed], confirm))
    assert sweeps == expected
    assert any("stub_fast+stub_fast_too" in s for s in sweeps), "the two survivors were tried together"
    runs = studio.runlog.runs(group_id=result.group_id)
    assert len(runs) == sum(len(set(s)) for s in sweeps) and {r["status"] for r in runs} == {"ok"}
    assert studio.runlog.db["groups"].get(result.group_id)["status"] == "ok"


def test_a_best_configuration_that_fails_in_its_combination_sweep_is_a_failed_row(
    stub_studio, monkeypatch, slow_unet
):
    from studio.errors import RunFailed

    sweeps = Sweeps()
    studio = stub_studio(stub("stub_fast", fast=lambda: True), stub("stub_fast_too", fast=lambda: True))
    real = studio.compute

    def compute(req, options):
        if sweeps.count > 1 and req.config_label in ("stub_fast", "stub_fast_too"):
            raise RunFailed(f"{req.config_label} ran out of memory")
        return real(req, options)

    monkeypatch.setattr(studio, "compute", compute)
    result = run_autotune(
        studio,
        request(),
        floor=ANY_IMAGE,
        techniques=["stub_fast", "stub_fast_too"],
        warmup=0,
        rounds=3,
        confirm_rounds=3,
        progress=sweeps,
    )
    failed = [r for r in result.rows if r["stage"] == "combination" and r["status"] == "failed"]
    assert failed and "ran out of memory" in failed[0]["error"]
    assert result.winner is None and result.confirmation["status"] == "failed", (
        "the confirmation could not run it"
    )
    assert studio.runlog.db["groups"].get(result.group_id)["status"] == "ok"


def test_the_summary_of_a_failed_confirmation_says_it_failed():
    from studio import report
    from studio.sweeps.autotune import AutotuneResult

    confirmation = {
        **report.failed_record("stub_fast", "stub_fast ran out of memory"),
        "stage": "confirmation",
    }
    text = summary(AutotuneResult(1, [confirmation], None, confirmation))
    assert "None" not in text and "ran out of memory" in text


def test_a_search_over_every_candidate_here_runs(studio, monkeypatch):
    """No list from the user: every technique that can run here, with its settings grid, in one singles sweep
    (more configurations than a Compare may hold: the pool comes from the registry, not from the user). The
    registry's OpenVINO is marked excluded for the run: each of its points is a conversion of the model, and
    tests/optimizations/test_openvino.py builds each mode. The rest still hold more configurations than a
    Compare, and both kinds of candidate the search treats differently: techniques without settings (one
    single each) and techniques with a grid (one single per point, the best point surviving)."""
    import dataclasses

    from studio.request import MAX_CONFIGS, build_request
    from studio.sweeps.autotune_search_space import GRID

    request = build_request(
        model="tiny-shapes", prompt="a big red circle on the left", steps=2, width=32, height=32
    )
    assert sum(len(GRID.get(name, [{}])) for name in candidates(request)) + 1 > MAX_CONFIGS
    monkeypatch.setitem(REGISTRY, "openvino", dataclasses.replace(REGISTRY["openvino"], autotune="excluded"))
    pool = candidates(request)
    singles = sum(len(GRID.get(name, [{}])) for name in pool)
    assert singles + 1 > MAX_CONFIGS
    assert any(name not in GRID for name in pool) and any(len(GRID.get(name, [])) > 1 for name in pool)
    result = run_autotune(studio, request, warmup=0, rounds=1, confirm_rounds=1)
    assert len([r for r in result.rows if r.get("stage") == "single"]) == singles


def test_the_step_lever_is_judged_by_the_prompt_score_not_by_its_pixels():
    """few_step draws along another path and tiny_vae decodes with another decoder: a low PSNR against the
    baseline does not fail them; a prompt score that drops beyond the floor does, and so does no score."""
    from studio.request.quality_floor import Floor

    floor = Floor(min_psnr=30.0, min_ssim=0.95, fidelity_drop=0.03)
    record = {
        "applied": ["few_step"],
        "psnr_db": 12.0,
        "ssim": 0.4,
        "fidelity": 1.0,
        "prompt_score_change": 0.0,
    }
    assert floor.check(record, 1.0) is None
    assert "prompt score -10.0 points" in floor.check({**record, "prompt_score_change": -10.0}, None)
    unscored = {**record, "fidelity": None, "prompt_score_change": None, "prompt_score_note": "no CLIP model"}
    assert floor.check(unscored, None) == "no prompt score to judge it by (no CLIP model)"
    assert "PSNR 12.0 dB" in floor.check({**record, "applied": ["deepcache"]}, 1.0)
