"""Per-session cancel flags (studio.ui.cancel) and a run cancelled before it starts (the engine)."""

from __future__ import annotations

import pytest

from studio.errors import Cancelled
from studio.ui.cancel import Cancellations


def test_a_cancel_between_the_click_and_the_start_stops_the_run_when_it_starts():
    cancels = Cancellations()
    cancels.reserve("s")
    assert cancels.cancel("s"), "a run asked for is something to cancel"
    assert cancels.begin("s")() == "cancelled by the user"
    assert cancels.begin("s")() is None, "the next run has a flag of its own"


def test_a_reservation_is_for_its_own_session_and_a_new_click_starts_clean():
    cancels = Cancellations()
    assert not cancels.cancel("s"), "nothing asked for, nothing running"
    cancels.reserve("s")
    cancels.reserve("other")
    cancels.cancel("other")
    running = cancels.begin("s")
    assert running() is None, "another session's cancel does not reach this one"
    assert cancels.cancel("s") and running() == "cancelled by the user"
    cancels.reserve("s")
    assert cancels.begin("s")() is None, "a cancel before the click does not reach the run it asks for"


def test_a_run_cancelled_before_it_starts_is_logged_cancelled_and_loads_nothing(studio):
    from tests.tiny import request

    with pytest.raises(Cancelled, match="Cancelled after 0 of 4 steps, before it started"):
        studio.generate(request([], steps=4), should_stop=lambda: "cancelled by the user")
    assert studio.manager.loaded() == [], "a cancelled run loads no model"
    [run] = studio.runlog.runs()
    assert run["status"] == "cancelled" and "before it started" in run["error"]
