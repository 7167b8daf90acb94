"""`Studio.profile`: a profile is a run in the run log (status ok, its figures in the `profile` column), a
failed one is logged failed, a refused one is not logged, and a database from before m006 opens."""

from __future__ import annotations

import pytest

from studio import report
from studio.errors import RunFailed, ValidationError
from studio.measure import step_profile
from studio.report import profile_text
from studio.request import build_request
from studio.runlog import RunLog
from studio.runlog.migrations import migrations

PROMPT = "a small blue square at the top, on a black background"

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def request(**kw):
    return build_request(
        **{"model": "tiny-shapes", "prompt": PROMPT, "seed": 3, "steps": 3, "width": 64, "height": 64, **kw}
    )


def test_a_profile_is_stored_with_its_run_and_reads_back(studio):
    run = studio.profile(request(optimizations=["channels_last"]))
    row = studio.runlog.get_run(run.run_id)
    assert row["status"] == "ok" and row["requested"] == row["applied"] == ["channels_last"]
    stored = row["profile"]
    assert stored == run.result.as_json() and stored["applied"] == ["channels_last"]
    assert {k["kind"] for k in stored["kinds"]} >= {"convolution", "matmul", "overhead"}
    assert row["step_median"] == pytest.approx(stored["unprofiled_step_s"], rel=1e-3)
    record = report.log_record(row)  # History shows it as a run like any other
    assert record["status"] == "ok" and record["config"] == "channels_last" and record["steps_per_s"] > 0
    text = profile_text.markdown(run.as_json())
    assert text.startswith("Step 2 of 3 of tiny-shapes (channels_last, fp32, 64×64, batch 1) on cpu took")
    assert "| aten::mkldnn_convolution | convolution |" in text


def test_a_failed_profile_is_logged_failed_and_a_refused_one_not_at_all(tmp_path, monkeypatch):
    from studio.engine import Studio

    def broken(manager, req):
        raise RunFailed("The output contains NaN.")

    monkeypatch.setattr(step_profile, "profile_step", broken)
    studio = Studio(db_path=tmp_path / "runs.db", outputs=tmp_path / "out")
    with pytest.raises(RunFailed):
        studio.profile(request())
    with pytest.raises(ValidationError, match="at least 2 steps"):
        studio.profile(request(steps=1))
    rows = studio.runlog.runs()
    assert [(r["status"], r["error"], r["profile"]) for r in rows] == [
        ("failed", "The output contains NaN.", None)
    ]


def test_a_run_log_from_before_m006_opens_and_gains_the_profile_column(tmp_path):
    from sqlite_utils import Database

    path = tmp_path / "runs.db"
    old = Database(path)
    migrations.apply(old, stop_before="m006_profile")
    assert "profile" not in old["runs"].columns_dict
    old["runs"].insert({"status": "ok", "model": "tiny-shapes", "latency_median": 0.5})  # m012 renames it
    old.close()
    log = RunLog(path)
    row = log.runs()[0]
    assert row["profile"] is None and row["latency_s"] == 0.5
    run_id = log.start_run({"model": "tiny-shapes", "requested": []})
    log.finish_run(run_id, "ok", profile={"step_s": 0.01, "kinds": []})
    assert log.get_run(run_id)["profile"] == {"step_s": 0.01, "kinds": []}


def test_on_zerogpu_the_step_is_profiled_under_spaces_gpu_and_logged_outside(tmp_path, monkeypatch):
    import sys

    from studio.engine import Studio, zerogpu
    from tests.engine.test_zerogpu import StandInSpaces

    spaces = StandInSpaces()
    monkeypatch.setitem(sys.modules, "spaces", spaces)
    monkeypatch.setenv("SPACES_ZERO_GPU", "true")
    original = RunLog.finish_run

    def outside(self, *args, **kwargs):
        assert not spaces.in_worker, "the run log was written inside the @spaces.GPU function"
        return original(self, *args, **kwargs)

    monkeypatch.setattr(RunLog, "finish_run", outside)
    studio = Studio(db_path=tmp_path / "runs.db", outputs=tmp_path / "out")
    req = request(steps=2)
    run = studio.profile(req)
    [call] = spaces.calls
    assert call["args"] == (req,) and call["duration"] == zerogpu.request_duration(req)
    assert studio.runlog.get_run(run.run_id)["profile"]["flops"] == run.result.flops > 0
