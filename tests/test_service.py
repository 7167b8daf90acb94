"""The engine's front door: runs are logged before they start, with their outcome after."""

from __future__ import annotations

import pytest
import torch

from studio.compare import markdown_table, run_compare
from studio.errors import Cancelled, RunFailed
from studio.validate import validate_request

PROMPT = "a small blue square at the top, on a black background"


def request(**kw):
    return validate_request(**{"model": "tiny-shapes", "prompt": PROMPT, "seed": 5, "steps": 3, **kw})


def test_generate_logs_an_ok_run_with_image_and_metrics(studio):
    result = studio.generate(request(opts=["channels_last"]))
    row = studio.runlog.get_run(result.run_id)
    assert row["status"] == "ok"
    assert row["requested"] == ["channels_last"] and row["applied"] == ["channels_last"]
    assert row["latency_median"] > 0 and row["peak_memory"] > 0 and row["steps"] == 3
    assert row["image_path"].endswith(".png") and result.images[0].size == (64, 64)
    assert row["fidelity"]["expected"]["shape"] == "square"
    assert row["versions"]["torch"] == torch.__version__.split("+")[0] or row["versions"]["torch"].startswith(torch.__version__[:4])
    assert len(row["step_seconds"]) == 3


def test_cancel_is_logged_as_cancelled(studio):
    with pytest.raises(Cancelled, match="Cancelled after 1 of 3 steps"):
        studio.generate(request(), should_stop=lambda: True)
    row = studio.runlog.runs(limit=1)[0]
    assert row["status"] == "cancelled"
    assert studio.generate(request()).metrics["latency_median"] > 0, "the pipeline must serve after a cancel"


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
    result = run_compare(studio, base, ["bf16", "channels_last", "baseline"], warmup=0, repeats=2)
    assert [r["config"] for r in result.rows] == ["baseline", "bf16", "channels_last"]
    assert result.rows[0]["speedup"] == pytest.approx(1.0) and result.rows[0]["verdict"] == "baseline"
    for row in result.rows[1:]:
        assert row["speedup"] == pytest.approx(result.rows[0]["latency_median"] / row["latency_median"])
        assert row["verdict"] in ("faster", "slower", "within noise")
        assert row["psnr"] is not None and row["ssim"] is not None
    runs = studio.runlog.runs(group_id=result.group_id)
    assert len(runs) == 3 and {r["status"] for r in runs} == {"ok"}
    assert studio.runlog.get_group(result.group_id)["status"] == "ok"
    assert "| bf16 |" in markdown_table(result.rows)


def test_compare_validates_every_config_before_running(studio):
    from studio.errors import ValidationError

    with pytest.raises(ValidationError, match="Unknown optimization"):
        run_compare(studio, request(), ["bf16", "nonsense"], warmup=0, repeats=1)
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
    result = studio.generate(request(prompt="a small blue zorblax square at the top, on a black background, 4k"))
    assert result.images[0].size == (64, 64)
    assert len(result.warnings) == 1 and "'zorblax'" in result.warnings[0] and "'4'" in result.warnings[0]
    assert studio.generate(request()).warnings == [], "a prompt in the model's language has no warning"


def test_a_recompile_storm_is_detected_and_reported(studio):
    results = [studio.generate(request(opts=["jit_trace_unet"], width=side, height=side, steps=2))
               for side in (64, 72, 80, 88)]
    assert [r.metrics["stats"]["trace_count"] for r in results] == [1, 2, 3, 4]
    assert [bool(r.warnings) for r in results] == [False, False, False, True]
    assert "Recompile storm" in results[-1].warnings[0] and "4 times" in results[-1].warnings[0]
    again = studio.generate(request(opts=["jit_trace_unet"], width=88, height=88, steps=2))
    assert again.warnings == [], "a shape already traced builds nothing: no storm warning"


def test_pays_off_after_counts_the_images_that_repay_a_first_call_cost():
    from studio.compare import pays_off_after

    assert pays_off_after(first_call=5.0, latency=1.0, base_latency=2.0) == 4  # 4 s extra, 1 s saved per image
    assert pays_off_after(first_call=1.05, latency=1.0, base_latency=2.0) == 1
    assert pays_off_after(first_call=5.0, latency=2.5, base_latency=2.0) is None, "slower: never repaid"
    assert pays_off_after(first_call=None, latency=1.0, base_latency=2.0) is None
