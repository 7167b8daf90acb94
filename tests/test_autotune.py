"""The auto-tuner: a pruned search that keeps only configurations meeting the quality floor, logged as one group."""

from __future__ import annotations

import pytest

from studio.autotune import Floor, candidates, pareto, run_autotune, summary
from studio.errors import ValidationError
from studio.validate import validate_request

PROMPT = "a big yellow triangle in the centre, on a black background"


def request(**kw):
    return validate_request(**{"model": "tiny-shapes", "prompt": PROMPT, "seed": 3, "steps": 4, **kw})


def test_nothing_below_the_quality_floor_can_win(studio):
    result = run_autotune(studio, request(), floor=Floor(min_psnr=99.0), techniques=["bf16", "deepcache"],
                          warmup=0, repeats=1, confirm_rounds=2)
    rows = {r["config"]: r for r in result.rows}
    assert set(rows) == {"baseline", "bf16", "deepcache"}, "each candidate measured once, alone"
    for name in ("bf16", "deepcache"):
        assert rows[name]["status"] == "ok" and not rows[name]["meets_floor"] and "PSNR" in rows[name]["floor"]
    assert result.winner == () and "keep the baseline" in summary(result)
    runs = studio.runlog.runs(group_id=result.group_id)
    assert len(runs) == 3 and {r["status"] for r in runs} == {"ok"}
    assert studio.runlog.get_group(result.group_id)["status"] == "ok"


def test_winner_is_confirmed_interleaved_and_only_combines_survivors(studio):
    result = run_autotune(studio, request(), floor=Floor(min_psnr=0, min_ssim=0, fidelity_drop=1),
                          techniques=["channels_last", "bf16"], warmup=0, repeats=2, confirm_rounds=2)
    survivors = {r["config"] for r in result.rows if r["stage"] == "single" and r["meets_floor"]
                 and r["verdict"] == "faster"}
    assert set(result.winner) <= survivors
    if result.winner:
        c = result.confirmation
        assert c["rounds"] == 2 and len(c["samples"]["baseline"]) == len(c["samples"]["winner"]) == 2
        assert c["speedup_min"] <= c["speedup"] <= c["speedup_max"] and c["verdict"] in ("faster", "within noise")
    assert result.pareto_quality and result.pareto_memory


def test_unavailable_or_unknown_techniques_are_refused_before_any_run(studio):
    with pytest.raises(ValidationError, match="xformers"):
        run_autotune(studio, request(), techniques=["xformers"])
    with pytest.raises(ValidationError, match="warp"):
        run_autotune(studio, request(), techniques=["warp"])
    assert studio.runlog.runs() == []


def test_candidates_leave_out_placement_memory_and_compile_by_default():
    names = candidates(request())
    assert "bf16" in names and "channels_last" in names
    slow_or_unhelpful = {"model_cpu_offload", "vae_tiling", "classic_attention", "torch_compile", "int8_static", "xformers"}
    assert not slow_or_unhelpful & set(names)
    assert "torch_compile" in candidates(request(), include_compile=True)


def test_pareto_front_keeps_only_undominated_points():
    rows = [{"config": c, "status": "ok", "latency_median": lat, "psnr": q} for c, lat, q in
            [("baseline", 1.0, float("inf")), ("a", 0.5, 40.0), ("b", 0.6, 35.0), ("c", 0.4, 20.0)]]
    assert pareto(rows, "psnr", better_high=True) == ["baseline", "a", "c"]
    mem = [{"config": c, "status": "ok", "latency_median": lat, "peak_memory_mb": m} for c, lat, m in
           [("baseline", 1.0, 100.0), ("a", 0.5, 120.0), ("b", 0.6, 90.0), ("c", 0.7, 130.0)]]
    assert pareto(mem, "peak_memory_mb", better_high=False) == ["a", "b"]


@pytest.mark.parametrize("settings, message", [
    ({"min_ssim": 2}, "min_ssim must be a number from 0 to 1"),
    ({"min_psnr": float("nan")}, "min_psnr must be a number from 0 to 200"),
    ({"warmup": float("nan")}, "warmup must be a whole number between 0 and 10"),
    ({"repeats": 0}, "repeats must be a whole number between 1 and 50"),
    ({"confirm_rounds": "x"}, "confirm_rounds must be a whole number between 0 and 50"),
])
def test_autotune_settings_are_checked_at_the_validation_boundary(settings, message):
    from studio.validate import validate_autotune

    with pytest.raises(ValidationError, match=message):
        validate_autotune(**settings)
