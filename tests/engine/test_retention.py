"""A bounded studio deletes the oldest runs and their images, by age and by the images' size, and says so."""

from __future__ import annotations

import datetime as dt

import pytest

from studio.engine import retention
from studio.request import build_request


def runs(studio, count: int) -> list:
    return [
        studio.generate(build_request(model="tiny-shapes", prompt="a red circle", seed=i, steps=1))
        for i in range(count)
    ]


def test_the_policy_is_a_setting_bounded_on_a_space_and_said_in_words(monkeypatch):
    for name in ("SPACE_ID", "STUDIO_KEEP_DAYS", "STUDIO_KEEP_MB"):
        monkeypatch.delenv(name, raising=False)
    assert retention.policy() == retention.Retention(None, None)
    assert retention.policy().words == "every run and image is kept"
    monkeypatch.setenv("SPACE_ID", "someone/studio")
    assert retention.policy() == retention.Retention(30, 2000)
    assert "older than 30 days" in retention.policy().words and "2,000 MB" in retention.policy().words
    monkeypatch.setenv("STUDIO_KEEP_DAYS", "off")
    assert retention.policy().days is None
    monkeypatch.setenv("STUDIO_KEEP_MB", "lots")
    with pytest.raises(ValueError, match="STUDIO_KEEP_MB must be a whole number"):
        retention.policy()


def test_runs_older_than_the_bound_go_with_their_images(studio):
    old, *kept = runs(studio, 3)
    long_ago = (dt.datetime.now(dt.UTC) - dt.timedelta(days=40)).isoformat()
    studio.runlog.db["runs"].update(old.run_id, {"created_at": long_ago})
    deleted = retention.prune(studio.runlog, studio.outputs, retention.Retention(30, None), force=True)
    assert deleted == 1
    assert {r["id"] for r in studio.runlog.runs(limit=-1)} == {r.run_id for r in kept}
    assert not any(studio.outputs.glob(f"run-{old.run_id:06d}-*.png"))
    assert all(any(studio.outputs.glob(f"run-{r.run_id:06d}-*.png")) for r in kept)


def test_past_the_images_bound_the_oldest_runs_go_first(studio):
    oldest, middle, newest = runs(studio, 3)
    # the oldest run's image made large, so that deleting it alone brings the folder under 1 MB
    (studio.outputs / f"run-{oldest.run_id:06d}-0.png").write_bytes(b"\0" * (2 * 2**20))
    deleted = retention.prune(studio.runlog, studio.outputs, retention.Retention(None, 1), force=True)
    assert deleted == 1
    assert {r["id"] for r in studio.runlog.runs(limit=-1)} == {middle.run_id, newest.run_id}
