"""X/Y Compare: the configurations at every value of a second axis, one interleaved sweep and one run-log
group; each point against the baseline at the same X; axes checked before anything runs. tiny-shapes."""

from __future__ import annotations

import pytest

from studio.errors import ValidationError
from studio.request import build_request
from studio.request.axes import auto_batches, parse_axes, parse_axis
from studio.sweeps import xy
from tests import tiny

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_a_batch_sweep_reports_throughput_per_batch_and_names_the_best(studio):
    req = tiny.request(steps=2)
    result = xy.run_xy(studio, req, ["vae_slicing"], parse_axis("batch", "1,2,4", req), warmup=0, rounds=2)
    assert [(p.x, p.config) for p in result.points] == [
        (x, c) for x in ("1", "2", "4") for c in ("baseline", "vae_slicing")
    ]
    for p in result.points:
        r = p.record
        assert r["batch"] == int(p.x) == len(p.result.images) and r["axis"] == "batch"
        assert r["seconds_per_image"] == pytest.approx(r["latency_s"] / r["batch"], rel=5e-3)
        assert r["images_per_s"] == pytest.approx(r["batch"] / r["latency_s"], rel=5e-3)
    baselines = [p.record for p in result.points if p.config == "baseline"]
    assert all(r["verdict"] == "baseline" and r["speedup"] == 1.0 for r in baselines)
    best = result.best_throughput()
    assert best.record["images_per_s"] == max(p.record["images_per_s"] for p in result.points)
    assert f"batch {best.x}" in xy.summary(result)
    group = studio.runlog.db["groups"].get(result.group_id)
    assert group["kind"] == "xy" and group["status"] == "ok"
    assert {r["group_id"] for r in studio.runlog.runs()} == {result.group_id}


def test_each_point_is_compared_with_the_baseline_at_its_own_x(studio):
    req = tiny.request(steps=2)
    result = xy.run_xy(studio, req, ["cfg_cutoff"], parse_axis("steps", "2,3", req), warmup=0, rounds=2)
    for x in ("2", "3"):
        point, base = result.point(x, "cfg_cutoff"), result.point(x, "baseline")
        assert point.result.request.steps == base.result.request.steps == int(x)
        row = studio.runlog.get_run(point.record["run_id"])
        assert row["baseline_run_id"] == base.record["run_id"]
    text = xy.markdown(result)
    assert "| configuration | steps=2 | steps=3 |" in text and "Seconds per step:" in text
    assert "Fastest per denoising step" in xy.summary(result), "steps compare per step, not per second"


def test_a_setting_axis_measures_what_it_does_not_change_once(studio):
    req = tiny.request(steps=3)
    axis = parse_axis("deepcache.interval", "2,3", req)
    labels, cells, entries = xy.plan(req, ["deepcache", "vae_slicing"], axis)
    assert labels == ["baseline", "deepcache", "vae_slicing"] and len(cells) == 6
    assert [e.label for e in entries] == [
        "baseline",
        "deepcache @ deepcache.interval=2",
        "vae_slicing",
        "deepcache @ deepcache.interval=3",
    ]
    assert [e.request.settings for e in entries][1::2] == [
        {"deepcache": {"interval": 2}},
        {"deepcache": {"interval": 3}},
    ]
    result = xy.run_xy(studio, req, ["deepcache", "vae_slicing"], axis, warmup=0, rounds=2)
    assert result.point("2", "baseline").record == {**result.point("3", "baseline").record, "x": "2"}
    assert result.point("3", "deepcache").record["config"] == "deepcache[interval=3]"


@pytest.mark.parametrize(
    ("axis", "values", "message"),
    [
        ("colour", "1,2", "Unknown axis 'colour'"),
        ("steps", "", "Give the values of the steps axis"),
        ("steps", "2,2", "has a value twice"),
        ("steps", "0,4", "steps must be a whole number between 1 and 200"),
        ("size", "64x60", "height must be a multiple of 8"),
        ("scheduler", "euler,fast", "Unknown scheduler 'fast'"),
        ("batch", "1,99", "batch must be a whole number between 1 and 8"),
        ("steps", ",".join(str(i) for i in range(1, 11)), "the limit is 8"),
        ("nosuch.setting", "1", "Unknown technique 'nosuch'"),
        ("seed", "+0", "seed count must be a whole number between 1 and 8"),
        ("seed", "1,x", "seed must be a whole number"),
        ("prompt", "hexagon,square", "the prompt does not contain it"),
    ],
)
def test_a_bad_axis_is_refused_before_anything_runs(studio, axis, values, message):
    with pytest.raises(ValidationError, match=message):
        parse_axis(axis, values, tiny.request())
    assert studio.runlog.runs() == []


def test_a_setting_axis_needs_a_configuration_with_its_technique_and_a_real_setting(studio):
    req = tiny.request(["deepcache"])
    with pytest.raises(ValidationError, match="deepcache has no setting 'speed'"):
        parse_axis("deepcache.speed", "1", req)
    axis = parse_axis("deepcache.interval", "2,3", tiny.request())
    with pytest.raises(ValidationError, match="No configuration uses deepcache"):
        xy.run_xy(studio, tiny.request(), ["vae_slicing"], axis)
    assert studio.runlog.runs() == []


def test_the_whole_grid_is_bounded_by_the_request_budget(studio, monkeypatch):
    monkeypatch.setenv("STUDIO_MAX_REQUEST_S", "5")
    req = tiny.request(steps=20)
    axis = parse_axis("batch", "auto", req)
    assert axis.values == tuple(auto_batches(req)) == ("1", "2", "4", "8")
    with pytest.raises(ValidationError, match="This sweep would take about"):
        xy.run_xy(studio, req, ["vae_slicing"], axis, warmup=1, rounds=5)
    assert studio.runlog.runs() == []


def test_batch_auto_goes_up_to_what_is_predicted_to_fit(studio, fake_gpus):
    fake_gpus(1)  # one fake 24 GB GPU: SDXL's fp32 weights (14 GB) leave room for a batch of 1 at 1024x1024
    req = build_request(model="sdxl-arch", prompt="x", device="cuda:0", width=1024, height=1024)
    axis = parse_axis("batch", "auto", req)
    assert axis.auto and axis.values == ("1", "2", "4", "8")
    assert xy.fitting_batches(studio, req, axis) == ("1",)
    slim = build_request(
        model="sdxl-arch", prompt="x", device="cuda:0", width=1024, height=1024, optimizations=["vae_slicing"]
    )
    assert xy.fitting_batches(studio, slim, axis) == ("1", "2", "4"), "one image decoded at a time"


def test_seed_and_prompt_axes_draw_a_labelled_grid_per_configuration(studio):
    """AUTOMATIC1111's X/Y plot as users reach for it: seeds on X (+2: the request's seed and the next), a
    prompt search and replace on Y; every point against the baseline at the same seed and prompt."""
    req = tiny.request(steps=2, prompt="a big red circle in the middle, on a white background")
    x_axis, y_axis = parse_axes("seed", "+2", "prompt", "circle, square", req)
    assert x_axis.values == ("3", "4") and y_axis.values == ("circle", "square")
    result = xy.run_xy(studio, req, ["vae_slicing"], x_axis, y_axis, warmup=0, rounds=1)
    assert result.rows == [(c, y) for c in ("baseline", "vae_slicing") for y in ("circle", "square")]
    for p in result.points:
        assert p.result.request.seed == int(p.x) and p.record["x"] == p.x and p.record["y"] == p.y
        assert p.result.request.prompt == f"a big red {p.y} in the middle, on a white background"
        base = result.point(p.x, "baseline", p.y)
        assert studio.runlog.get_run(p.record["run_id"])["baseline_run_id"] in (None, base.record["run_id"])
    images = {(p.x, p.y): p.result.images[0].tobytes() for p in result.points if p.config == "baseline"}
    assert len(set(images.values())) == 4, "each seed and each prompt draws its own image"
    text = xy.markdown(result)
    assert "| configuration | seed=3 | seed=4 |" in text and "| vae_slicing · prompt=square |" in text
    grids = xy.as_json(result)["grids"]
    assert set(grids) == {"baseline", "vae_slicing"} and [len(row) for row in grids["baseline"]] == [2, 2]
    assert all(path and path.endswith(".png") for row in grids["vae_slicing"] for path in row)


@pytest.mark.parametrize(
    ("x", "x_values", "y", "y_values", "message"),
    [
        (None, "", "seed", "1,2", "needs an X axis"),
        ("seed", "1,2", "seed", "3,4", "both seed"),
        ("batch", "auto", "seed", "1,2", "Batch 'auto' is for an X axis alone"),
    ],
)
def test_a_bad_pair_of_axes_is_refused_before_anything_runs(studio, x, x_values, y, y_values, message):
    with pytest.raises(ValidationError, match=message):
        parse_axes(x, x_values, y, y_values, tiny.request())
    assert studio.runlog.runs() == []
