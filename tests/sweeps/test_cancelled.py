"""A cancelled sweep keeps what it measured: configurations that finished all their rounds stay logged ok,
the others are logged cancelled and come back with the rounds they had (partial), the group is cancelled,
and the error says where it stopped. Also where a sweep says it is while it runs. tiny-shapes at 32x32 with
2 steps: a call is ~30 ms."""

from __future__ import annotations

import statistics

import pytest

from studio.request import build_request
from studio.request.axes import parse_axis
from studio.request.quality_floor import Floor
from studio.sweeps.autotune import run_autotune
from studio.sweeps.compare import run_compare
from studio.sweeps.ladder import plan, run_ladder
from studio.sweeps.progress import Position, Tracker
from studio.sweeps.runner import SweepCancelled
from studio.sweeps.xy import run_xy

PROMPT = "a big red circle on the left, on a white background"
STOP = "stopped by the test"
pytestmark = pytest.mark.usefixtures("one_torch_thread")


def request(**kw):
    return build_request(
        **{"model": "tiny-shapes", "prompt": PROMPT, "seed": 7, "steps": 2, "width": 32, "height": 32, **kw}
    )


def stop_at_call(studio, monkeypatch, call: int):
    """A stop check that says stop from the `call`-th `studio.compute` on (1 = the first warm-up): that call
    is cancelled before its first step. Returns the check and the labels called."""
    real, called = studio.compute, []

    def compute(req, options):
        called.append(req.config_label)
        return real(req, options)

    monkeypatch.setattr(studio, "compute", compute)
    return (lambda: STOP if len(called) >= call else None), called


def logged(studio, group_id: int) -> dict[str, dict]:
    return {r["config_label"]: r for r in studio.runlog.runs(group_id=group_id)}


def test_a_compare_cancelled_after_the_baselines_rounds_keeps_it_and_the_rounds_of_the_others(
    studio, monkeypatch
):
    # warm-ups B C S, then rounds B C S x3: the 11th call is channels_last's third round
    should_stop, called = stop_at_call(studio, monkeypatch, 11)
    with pytest.raises(SweepCancelled, match=STOP) as caught:
        run_compare(studio, request(), ["channels_last", "sdpa"], warmup=1, rounds=3, should_stop=should_stop)
    exc = caught.value
    assert called == ["baseline", "channels_last", "sdpa"] * 3 + ["baseline", "channels_last"]
    base, cl, sdpa = exc.records
    assert (base["status"], base["rounds"], base["verdict"], base["speedup"]) == ("ok", 3, "baseline", 1.0)
    for record in (cl, sdpa):
        assert record["status"] == "cancelled" and record["partial"] and record["rounds_asked"] == 3
        assert record["rounds"] == 2 and record["latency_s"] > 0 and record["verdict"] is None
        assert record["error"] == "cancelled after 2 of 3 rounds"
    seconds = {e.label: [c.measured.runs[-1].seconds for c in e.calls] for e in exc.partial.entries}
    ratios = [b / o for b, o in zip(seconds["baseline"], seconds["channels_last"][1:], strict=False)]
    assert cl["speedup"] == pytest.approx(statistics.median(ratios), abs=1e-3), "over the rounds both ran"
    assert cl["speedup_min"] == pytest.approx(min(ratios), abs=1e-3)

    group = studio.runlog.db["groups"].get(exc.partial.group_id)
    assert group["status"] == "cancelled" and STOP in group["error"]
    runs = logged(studio, exc.partial.group_id)
    assert runs["baseline"]["status"] == "ok" and runs["baseline"]["latency_s"] is not None
    assert runs["channels_last"]["status"] == runs["sdpa"]["status"] == "cancelled"
    assert (cl["run_id"], sdpa["run_id"]) == (runs["channels_last"]["id"], runs["sdpa"]["id"])
    assert exc.where.text() == "configuration 2 of 3 (channels_last), round 3 of 3"
    assert exc.summary() == (
        "Cancelled (stopped by the test) during round 3 of 3, configuration 2 of 3 (channels_last), "
        "after 10 of 12 calls: 1 of 3 configurations finished (3 rounds each)."
    )


def test_a_compare_cancelled_in_its_warm_ups_has_nothing_measured_and_says_so(studio, monkeypatch):
    should_stop, _ = stop_at_call(studio, monkeypatch, 2)
    with pytest.raises(SweepCancelled) as caught:
        run_compare(studio, request(), ["channels_last"], warmup=1, rounds=2, should_stop=should_stop)
    assert [(r["status"], r["rounds"]) for r in caught.value.records] == [("cancelled", None)] * 2
    assert caught.value.records[0]["error"] == "the sweep stopped before its first round"
    assert {r["status"] for r in logged(studio, caught.value.partial.group_id).values()} == {"cancelled"}
    assert "0 of 2 configurations finished (2 rounds each)" in caught.value.summary()


def test_a_cancel_by_the_user_reads_as_a_sentence(studio, monkeypatch):
    should_stop, _ = stop_at_call(studio, monkeypatch, 4)
    with pytest.raises(SweepCancelled) as caught:
        run_compare(
            studio,
            request(),
            ["channels_last"],
            warmup=1,
            rounds=2,
            should_stop=lambda: should_stop() and "cancelled by the user",
        )
    assert caught.value.summary().startswith("Cancelled by the user during round 1 of 2, configuration 2")


def test_a_cancelled_ladder_keeps_its_skipped_and_measured_rungs(studio, monkeypatch):
    req = request()
    steps = plan(req)
    runnable = [s for s in steps if not s.skipped]
    # all the warm-ups and the whole first round, then a stop in the second round
    should_stop, _ = stop_at_call(studio, monkeypatch, 2 * len(runnable) + 2)
    with pytest.raises(SweepCancelled) as caught:
        run_ladder(studio, req, warmup=1, rounds=2, should_stop=should_stop)
    rows = caught.value.records
    assert [r["step"] for r in rows] == [s.label for s in steps]
    assert all(r["status"] == "skipped" for r, s in zip(rows, steps, strict=True) if s.skipped)
    measured = [r for r, s in zip(rows, steps, strict=True) if not s.skipped]
    assert measured[0]["status"] == "ok" and measured[0]["rounds"] == 2, "the first rung finished"
    assert all(r["partial"] and r["rounds"] == 1 for r in measured[2:])
    assert studio.runlog.db["groups"].get(caught.value.partial.group_id)["status"] == "cancelled"


def test_a_cancelled_xy_sweep_keeps_each_point_it_measured(studio, monkeypatch):
    req = request()
    axis = parse_axis("steps", "2,3", req)
    should_stop, _ = stop_at_call(studio, monkeypatch, 6)  # 4 warm-ups, then a stop in the first round
    with pytest.raises(SweepCancelled) as caught:
        run_xy(studio, req, ["channels_last"], axis, warmup=1, rounds=2, should_stop=should_stop)
    records = caught.value.records
    assert len(records) == 4 and records[0]["partial"] and records[0]["rounds"] == 1
    assert [r["status"] for r in records] == ["cancelled"] * 4
    assert sum(bool(r.get("partial")) for r in records) == 1


def test_a_cancelled_autotune_returns_the_rows_of_its_stages_so_far(studio, monkeypatch):
    # the single stage: baseline and channels_last, 1 warm-up and 2 rounds each; stop in its second round
    should_stop, _ = stop_at_call(studio, monkeypatch, 6)
    told = []
    with pytest.raises(SweepCancelled) as caught:
        run_autotune(
            studio,
            request(),
            floor=Floor(min_psnr=0, min_ssim=-1, fidelity_drop=1),
            techniques=["channels_last"],
            warmup=1,
            rounds=2,
            should_stop=should_stop,
            progress=lambda done, calls, where: told.append(where),
        )
    exc = caught.value
    assert exc.stage == "measuring each technique alone"
    assert [(r["config"], r["stage"], r["status"]) for r in exc.records] == [
        ("baseline", "baseline", "ok"),
        ("channels_last", "single", "cancelled"),
    ]
    assert exc.records[1]["partial"] and exc.records[1]["rounds"] == 1
    assert [r["meets_floor"] for r in exc.records] == [True, False], "a partial row is not judged"
    assert told[0] == "measuring each technique alone, configuration 1 of 2 (baseline), warm-up 1 of 1"
    (group,) = studio.runlog.db["groups"].rows
    assert group["status"] == "cancelled"


def test_the_tracker_says_where_a_sweep_is_and_how_far_it_got():
    told = []
    tracker = Tracker(["baseline", "sdpa"], 1, 2, lambda *a: told.append(a), lambda: None)
    tracker.before("warmup", "baseline")
    tracker.on_step(5, 20)
    assert told[-1] == (0.25, 6, "configuration 1 of 2 (baseline), warm-up 1 of 1, step 5 of 20")
    for phase, label in [("warmup", "sdpa"), ("round", "baseline"), ("round", "sdpa"), ("round", "baseline")]:
        tracker.before(phase, label)
    assert told[-1] == (4.0, 6, "configuration 1 of 2 (baseline), round 2 of 2")
    assert tracker.should_stop() is None and tracker.reason is None
    assert Position(0, 1, 1, 1, "x", "round", 1, 1, 7, 8).text().endswith("round 1 of 1, step 7 of 8")
