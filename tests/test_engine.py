"""The engine's front door: runs are logged before they start, with their outcome after."""

from __future__ import annotations

import statistics

import pytest
import torch

from studio import report
from studio.errors import Cancelled, RunFailed
from studio.measure.protocol import verdict
from studio.request import build_request
from studio.sweeps.compare import run_compare

PROMPT = "a small blue square at the top, on a black background"


def request(**kw):
    return build_request(**{"model": "tiny-shapes", "prompt": PROMPT, "seed": 5, "steps": 3, **kw})


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def own_warnings(result) -> list[str]:
    """The run's warnings but the busy-host one, which depends on what else this machine runs meanwhile."""
    return [w for w in result.warnings if not w.startswith("The host was busy")]


def test_a_busy_host_is_a_warning_of_its_own(studio, monkeypatch):
    from studio.measure import host

    monkeypatch.setattr(
        host.HostMonitor,
        "__exit__",
        lambda self, *exc: setattr(self, "result", host.HostLoad(busy_pct=60.0, steal_pct=0.0, seconds=1.0)),
    )
    result = studio.generate(request())
    assert result.warnings == [
        "The host was busy while this was measured (other processes used 60% of the CPU): "
        "the timings are unreliable; measure again when the machine is quiet."
    ]
    row = studio.runlog.get_run(result.run_id)
    assert (row["host_busy_pct"], row["host_steal_pct"]) == (60.0, 0.0)
    assert report.single_record(result)["host_busy"] and report.log_record(row)["host_busy"]


def test_generate_logs_an_ok_run_with_image_and_metrics(studio):
    result = studio.generate(request(optimizations=["channels_last"]))
    row = studio.runlog.get_run(result.run_id)
    assert row["status"] == "ok"
    assert row["requested"] == ["channels_last"] and row["applied"] == ["channels_last"]
    assert row["latency_s"] > 0 and row["peak_memory"] > 0 and row["steps"] == 3
    assert row["image_path"].endswith(".png") and result.images[0].size == (64, 64)
    assert row["fidelity"]["expected"]["shape"] == "square"
    assert row["versions"]["torch"] == torch.__version__.split("+")[0] or row["versions"]["torch"].startswith(
        torch.__version__[:4]
    )
    assert len(row["step_seconds"]) == 3


def test_cancel_is_logged_as_cancelled(studio):
    checks = iter([None])  # the check before the run starts passes, the first step's stops it
    with pytest.raises(Cancelled, match="Cancelled after 1 of 3 steps"):
        studio.generate(request(), should_stop=lambda: next(checks, True))
    row = studio.runlog.runs(limit=1)[0]
    assert row["status"] == "cancelled"
    assert studio.generate(request()).metrics["latency_s"] > 0, "the pipeline must serve after a cancel"


def test_out_of_memory_is_logged_failed_with_a_suggestion_and_next_run_works(studio, monkeypatch):
    from diffusers import UNet2DConditionModel

    real = UNet2DConditionModel.forward

    def oom(self, *a, **k):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(UNet2DConditionModel, "forward", oom)
    with pytest.raises(RunFailed, match="Out of memory.*vae_tiling"):
        studio.generate(request())
    row = studio.runlog.runs(limit=1)[0]
    assert row["status"] == "failed" and "Out of memory" in row["error"]
    monkeypatch.setattr(UNet2DConditionModel, "forward", real)
    assert studio.generate(request()).run_id > row["id"]


def test_nan_output_is_a_failure_not_a_success(studio, monkeypatch):
    from diffusers import UNet2DConditionModel

    real = UNet2DConditionModel.forward

    def nan(self, *a, **k):
        out = real(self, *a, **k)
        out[0].fill_(float("nan")) if isinstance(out, tuple) else out.sample.fill_(float("nan"))
        return out

    monkeypatch.setattr(UNet2DConditionModel, "forward", nan)
    with pytest.raises(RunFailed, match="NaN"):
        studio.generate(request())
    assert studio.runlog.runs(limit=1)[0]["status"] == "failed"


def test_compare_is_one_group_with_consistent_rows(studio):
    base = request()
    result = run_compare(studio, base, ["bf16", "channels_last", "baseline"], warmup=0, rounds=3)
    rows = result.records
    assert [r["config"] for r in rows] == ["baseline", "bf16", "channels_last"]
    assert rows[0]["speedup"] == pytest.approx(1.0) and rows[0]["verdict"] == "baseline"
    base_lat = result.results[0].metrics["latency_all"]
    for row, res in zip(rows[1:], result.results[1:], strict=True):
        ratios = [b / o for b, o in zip(base_lat, res.metrics["latency_all"], strict=True)]
        assert row["rounds"] == 3 and row["speedup"] == pytest.approx(statistics.median(ratios), abs=1e-3)
        assert row["speedup_min"] <= row["speedup"] <= row["speedup_max"]
        assert row["verdict"] == verdict(ratios) and row["verdict"] in ("faster", "slower", "within noise")
        assert row["ssim"] is not None and row["latency_s"] > 0 and row["peak_memory_mb"] > 0
    assert rows[1]["psnr_db"] is not None, "bf16 changes the image"
    runs = studio.runlog.runs(group_id=result.group_id)
    assert len(runs) == 3 and {r["status"] for r in runs} == {"ok"}
    assert studio.runlog.db["groups"].get(result.group_id)["status"] == "ok"
    table = report.markdown(rows)
    assert "| bf16 |" in table and "×1.00 (baseline)" in table


def test_compare_validates_every_config_before_running(studio):
    from studio.errors import ValidationError

    with pytest.raises(ValidationError, match="Unknown optimization"):
        run_compare(studio, request(), ["bf16", "nonsense"], warmup=0, rounds=1)
    assert studio.runlog.runs() == []


def test_read_only_run_log_still_returns_the_image_and_says_why(studio, tmp_path):
    kept = studio.generate(request(seed=1))
    studio.runlog.db.execute("PRAGMA query_only = ON")  # this thread's connection now refuses every write
    result = studio.generate(request(seed=2))
    assert result.images[0].size == (64, 64) and result.run_id is None
    assert any("could not be written" in w and "readonly" in w for w in result.warnings), result.warnings
    assert result.image_path and result.image_path.endswith(".png"), "the image is still stored"
    from studio.runlog import RunLog

    rows = RunLog(tmp_path / "runs.db").runs(limit=10)
    assert [r["id"] for r in rows] == [kept.run_id] and rows[0]["status"] == "ok", "what was logged is intact"


def test_full_disk_for_images_still_returns_the_image_and_says_why(studio):
    next_id = studio.generate(request(seed=1)).run_id + 1
    (studio.outputs / f"run-{next_id:06d}-0.png").symlink_to("/dev/full")  # writes fail with ENOSPC
    result = studio.generate(request(seed=2))
    assert result.run_id == next_id and result.images[0].size == (64, 64) and result.image_path is None
    assert any("No space left on device" in w for w in result.warnings), result.warnings
    row = studio.runlog.get_run(next_id)
    assert row["status"] == "ok" and row["image_path"] is None


def test_failed_run_with_a_read_only_log_keeps_both_reasons(studio):
    studio.runlog.db.execute("PRAGMA query_only = ON")
    with pytest.raises(Cancelled) as info:
        studio.generate(request(), should_stop=lambda: "cancelled by the user")
    assert "cancelled by the user" in str(info.value)
    assert any("could not be written" in note for note in info.value.__notes__)


def test_unknown_words_are_ignored_with_a_warning_not_a_crash(studio):
    result = studio.generate(
        request(prompt="a small blue zorblax square at the top, on a black background, 4k")
    )
    assert result.images[0].size == (64, 64)
    warnings = own_warnings(result)
    assert len(warnings) == 1 and "'zorblax'" in warnings[0] and "'4'" in warnings[0]
    assert own_warnings(studio.generate(request())) == [], "a prompt in the model's language has no warning"


def test_a_recompile_storm_is_detected_and_reported(studio):
    results = [
        studio.generate(request(optimizations=["jit_trace_unet"], width=side, height=side, steps=2))
        for side in (64, 72, 80, 88)
    ]
    assert [r.metrics["stats"]["trace_count"] for r in results] == [1, 2, 3, 4]
    assert [bool(own_warnings(r)) for r in results] == [False, False, False, True]
    assert "Recompile storm" in results[-1].warnings[0] and "4 times" in results[-1].warnings[0]
    again = studio.generate(request(optimizations=["jit_trace_unet"], width=88, height=88, steps=2))
    assert own_warnings(again) == [], "a shape already traced builds nothing: no storm warning"


def test_pays_off_after_counts_the_images_that_repay_a_first_call_cost():
    def pays(first_call, latency, base_latency):
        return report.pays_off_after(
            {"first_call_seconds": first_call, "latency_s": latency}, {"latency_s": base_latency}
        )

    assert pays(first_call=5.0, latency=1.0, base_latency=2.0) == 4  # 4 s extra, 1 s saved per image
    assert pays(first_call=1.05, latency=1.0, base_latency=2.0) == 1
    assert pays(first_call=5.0, latency=2.5, base_latency=2.0) is None, "slower: never repaid"
    assert pays(first_call=None, latency=1.0, base_latency=2.0) is None
    assert pays(first_call=0.9, latency=1.0, base_latency=2.0) is None, "no extra first-call cost to repay"
    assert report.pays_off_after({"first_call_seconds": 5.0, "latency_s": 1.0}, None) is None


def test_a_generated_run_in_the_shared_vocabulary(studio):
    result = studio.generate(request(optimizations=["channels_last"]), warmup=1, rounds=2)
    record = report.single_record(result)
    assert record["config"] == "channels_last" and record["rounds"] == 2 and record["status"] == "ok"
    assert record["latency_s"] == pytest.approx(statistics.median(result.metrics["latency_all"]), abs=1e-4)
    assert record["peak_memory_mb"] == pytest.approx(result.metrics["peak_memory"] / 2**20, abs=0.1)
    assert record["speedup"] is None and record["verdict"] is None, "a single run has no baseline"
    assert record["host_busy_pct"] is not None
    assert record["first_call_s"] == pytest.approx(result.metrics["warmup_seconds"][0], abs=1e-3), (
        "the warm-up"
    )
    assert "peak_memory" not in record, "the raw byte count is read as peak_memory_mb"


def test_step_progress_counts_the_denoisers_calls_and_never_passes_its_total(studio):
    """PNDM calls the denoiser once more than its steps: progress says "step 5 of 5" at 4 steps, not "5 of
    4"."""
    from studio.measure import bench
    from tests import tiny

    seen: list[tuple[int, int]] = []
    req = tiny.request(steps=4, scheduler="pndm")
    with studio.manager.acquire(req) as prepared:
        bench.run_once(prepared, req, on_step=lambda step, steps: seen.append((step, steps)))
    assert seen[-1] == (5, 5), seen
    assert all(step <= steps for step, steps in seen)
