"""Every run's record says how well its image shows the prompt: through the engine (Generate, Compare), the
run log, History's records and the CSV. The bundled model as tiny-shapes is scored by its own judge; the same
weights read as a local folder (no judge) are scored by the tiny CLIP the setting names."""

from __future__ import annotations

import time

import pytest

from pipelines.registry import ASSETS
from studio import report
from studio.measure import prompt_score
from studio.request import build_request
from studio.sweeps.compare import run_compare
from tests.measure import tiny_clip

PROMPT = "a small blue square at the top, on a black background"
FIELDS = ("prompt_score", "prompt_score_by", "prompt_score_change", "prompt_score_note")

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture
def clip_folder(tmp_path, monkeypatch):
    folder = tiny_clip.build(tmp_path / "clip")
    monkeypatch.setenv("STUDIO_CLIP_MODEL", str(folder))
    return folder


def request(model: str = "tiny-shapes", **kw):
    args = {"model": model, "prompt": PROMPT, "seed": 5, "steps": 2, "width": 64, "height": 64, **kw}
    return build_request(**args)


def logged(studio, run_id: int) -> dict:
    """A run as History reads it back from the run log."""
    return report.log_record(studio.runlog.get_run(run_id))


def test_a_tiny_shapes_run_is_scored_by_its_own_judge(studio, clip_folder):
    result = studio.generate(request())
    record = report.single_record(result)
    assert record["prompt_score"] == pytest.approx(100 * record["fidelity"], abs=0.01)
    assert (record["prompt_score_by"], record["prompt_score_note"]) == ("fidelity judge", None)
    assert record["prompt_score_change"] is None, "a single run has no baseline"
    assert {k: logged(studio, result.run_id)[k] for k in FIELDS} == {k: record[k] for k in FIELDS}


def test_a_compare_scores_each_image_with_clip_and_its_change_from_the_baseline(studio, clip_folder):
    local = str(ASSETS / "tiny-shapes")  # the bundled weights as a local folder: no judge of their own
    result = run_compare(studio, request(local), ["baseline", "bf16"], warmup=0, rounds=1)
    base, bf16 = result.records
    for record in result.records:
        assert 0 <= record["prompt_score"] <= 100 and record["prompt_score_by"] == f"clip:{clip_folder}"
        assert record["prompt_score_note"] is None
    assert base["prompt_score_change"] is None
    assert bf16["prompt_score_change"] == pytest.approx(bf16["prompt_score"] - base["prompt_score"], abs=0.02)
    history = [logged(studio, r["run_id"]) for r in result.records]
    assert [{k: h[k] for k in FIELDS} for h in history] == [{k: r[k] for k in FIELDS} for r in result.records]
    header = report.to_csv(result.records).splitlines()[0].split(",")
    assert [c for c in header if c.startswith("prompt_score")] == list(FIELDS)
    table = report.markdown(result.records)
    assert "| Prompt score |" in table and f"Prompt score: the CLIP score of {clip_folder}" in table


def test_without_a_clip_model_the_record_says_why(studio, monkeypatch):
    monkeypatch.setenv("STUDIO_CLIP_MODEL", "studio-tests/no-such-clip")
    result = studio.generate(request(str(ASSETS / "tiny-shapes")))
    record = logged(studio, result.run_id)
    assert record["status"] == "ok" and record["prompt_score"] is None and record["prompt_score_by"] is None
    assert record["prompt_score_note"].startswith(
        "no CLIP model: studio-tests/no-such-clip is not in the local"
    )
    assert "No prompt score: no CLIP model: studio-tests/no-such-clip" in report.markdown([record])


def test_the_score_is_taken_after_the_timed_calls(studio, clip_folder, monkeypatch):
    """A scorer that takes 2 s leaves the run's latency as it was: it is not in any timed region."""
    score = prompt_score.clip_score

    def slow(*args, **kwargs):
        time.sleep(2.0)
        return score(*args, **kwargs)

    monkeypatch.setattr(prompt_score, "clip_score", slow)
    result = studio.generate(request(str(ASSETS / "tiny-shapes")), warmup=1, rounds=2)
    record = report.single_record(result)
    assert record["prompt_score"] is not None and record["latency_s"] < 2.0
    assert max(result.metrics["latency_all"]) < 2.0 and max(result.metrics["warmup_seconds"]) < 2.0
