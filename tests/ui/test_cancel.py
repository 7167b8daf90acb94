"""Per-session cancel flags (studio.ui.cancel) and a run cancelled before it starts (the engine)."""

from __future__ import annotations

from pathlib import Path

import pytest

from studio.errors import Cancelled
from studio.ui.cancel import Cancellations


def test_a_cancel_between_the_click_and_the_start_stops_the_run_when_it_starts():
    cancels = Cancellations()
    cancels.reserve("s", "generate")
    assert cancels.cancel("s", "generate"), "a run asked for is something to cancel"
    with cancels.running("s", "generate") as should_stop:
        assert should_stop() == "cancelled by the user"
    with cancels.running("s", "generate") as should_stop:
        assert should_stop() is None, "the next run has a flag of its own"


def test_a_reservation_is_for_its_own_session_and_a_new_click_starts_clean():
    cancels = Cancellations()
    assert not cancels.cancel("s", "generate"), "nothing asked for, nothing running"
    cancels.reserve("s", "generate")
    cancels.reserve("other", "generate")
    cancels.cancel("other", "generate")
    with cancels.running("s", "generate") as should_stop:
        assert should_stop() is None, "another session's cancel does not reach this one"
        assert cancels.cancel("s", "generate") and should_stop() == "cancelled by the user"
    cancels.reserve("s", "generate")
    with cancels.running("s", "generate") as should_stop:
        assert should_stop() is None, "a cancel before the click does not reach the run it asks for"


def test_once_a_run_has_ended_a_cancel_finds_nothing_to_stop_even_if_the_run_failed():
    cancels = Cancellations()
    with cancels.running("s", "generate"):
        assert cancels.cancel("s", "generate"), "a run under way is something to cancel"
    assert not cancels.cancel("s", "generate"), "a finished run is not"
    with pytest.raises(RuntimeError), cancels.running("s", "generate"):
        raise RuntimeError("the run failed")
    assert not cancels.cancel("s", "generate"), "nor is a failed one"


def test_a_cancel_stops_every_run_of_its_job_in_the_session_and_the_last_to_end_releases_it():
    cancels = Cancellations()
    with cancels.running("s", "generate") as first:
        with cancels.running("s", "generate") as second:  # a client that asked twice
            assert cancels.cancel("s", "generate")
            assert first() == second() == "cancelled by the user"
        assert cancels.cancel("s", "generate"), "the first run is still under way"
    assert not cancels.cancel("s", "generate")


def test_a_tabs_cancel_stops_its_own_run_not_another_tabs_running_or_waiting():
    cancels = Cancellations()
    with cancels.running("s", "generate") as generating:
        cancels.reserve("s", "compare")  # Compare clicked in the same page: it waits for the queue
        assert cancels.cancel("s", "generate") and generating() == "cancelled by the user"
        with cancels.running("s", "compare") as comparing:
            assert comparing() is None, "Generate's Cancel does not reach the Compare that waited"
            assert not cancels.cancel("s", "ladder"), "the Ladder has nothing running"
            assert comparing() is None


def test_a_run_cancelled_before_it_starts_is_logged_cancelled_and_loads_nothing(studio):
    from tests.tiny import request

    with pytest.raises(Cancelled, match="Cancelled after 0 of 4 steps, before it started"):
        studio.generate(request([], steps=4), should_stop=lambda: "cancelled by the user")
    assert studio.manager.loaded() == [], "a cancelled run loads no model"
    [run] = studio.runlog.runs()
    assert run["status"] == "cancelled" and "before it started" in run["error"]


# ---- what a cancelled sweep shows (studio.ui.progress_views) -----------------------------------------------


def cancelled_compare(studio, monkeypatch, stop_at: int, **kw):
    """A Compare of the baseline, channels_last and sdpa (1 warm-up, 3 rounds) whose stop check says
    'cancelled by the user' from its `stop_at`-th call on; the SweepCancelled it raises."""
    from studio.request import build_request
    from studio.sweeps.compare import run_compare
    from studio.sweeps.runner import SweepCancelled

    real, called = studio.compute, []
    monkeypatch.setattr(studio, "compute", lambda req, options: called.append(1) or real(req, options))
    req = build_request(model="tiny-shapes", prompt="a red circle", seed=1, steps=2, width=32, height=32)
    with pytest.raises(SweepCancelled) as caught:
        run_compare(
            studio,
            req,
            ["channels_last", "sdpa"],
            warmup=1,
            rounds=3,
            should_stop=lambda: "cancelled by the user" if len(called) >= stop_at else None,
            **kw,
        )
    return caught.value


def test_a_cancelled_compare_shows_the_sentence_and_every_configuration_so_far(studio, monkeypatch):
    from studio.sweeps.compare import run_compare
    from studio.ui import progress_views, views
    from tests import tiny

    exc = cancelled_compare(studio, monkeypatch, 11)  # in channels_last's third round
    outputs = progress_views.compare_cancelled(exc)
    finished = views.compare_outputs(run_compare(studio, tiny.request(steps=2), ["sdpa"], warmup=0, rounds=1))
    assert list(outputs) == list(finished), "the outputs of views.compare_outputs, in their order"
    note, gallery, table, pairs = outputs["headline"], outputs["gallery"], outputs["table"], outputs["pairs"]
    bars, choice, slider = outputs["latency_chart"], outputs["slider_choice"], outputs["slider"]
    csv, md, rows = outputs["csv"], outputs["markdown"], outputs["rows"]
    assert not outputs["xy_results"]["visible"] and outputs["grid"] is None, "no X/Y sweep to show"
    assert note.startswith(
        "**Compare: Cancelled by the user during round 3 of 3, configuration 2 of 3 (channels_last), "
        "after 10 of 12 calls: 1 of 3 configurations finished (3 rounds each).**"
    )
    assert "*partial*" in note
    shown = table.data  # a Styler, as views.styled shows tables
    assert list(shown["Verdict"]) == ["baseline", "partial: 2 of 3 rounds", "partial: 2 of 3 rounds"]
    assert all(cell.endswith(" ms") or cell.endswith(" s") for cell in shown["Latency"])
    assert [c for _, c in gallery][1].endswith("· partial: 2 of 3 rounds") and len(gallery) == 3
    assert gallery[0][0].size == (32, 32) and list(pairs) == ["channels_last", "sdpa"]
    assert slider == pairs["channels_last"] and choice["value"] == "channels_last"
    assert list(bars["value"]["configuration"]) == bars["sort"] == ["baseline", "channels_last", "sdpa"]
    assert csv.endswith("compare-cancelled.csv") and rows is exc.records
    assert "| sdpa |" in Path(md).read_text() and "partial: 2 of 3 rounds" in Path(md).read_text()


def test_a_compare_cancelled_before_its_first_round_says_so_without_images(studio, monkeypatch):
    from studio.ui import progress_views

    exc = cancelled_compare(studio, monkeypatch, 1)
    outputs = progress_views.compare_cancelled(exc)
    note, gallery, table = outputs["headline"], outputs["gallery"], outputs["table"]
    assert "before the first call" not in note and "after 0 of 12 calls" in note
    assert gallery == [] and set(table.data["Verdict"]) == {"cancelled"}
    assert "the sweep stopped before its first round" in table.data["Latency"][0]


def test_cancelled_ladder_and_autotune_fill_their_tabs_outputs():
    from studio.errors import Cancelled
    from studio.ui import progress_views

    plain = Cancelled("Cancelled after 0 of 4 steps, before it started (cancelled by the user).")
    ladder = progress_views.ladder_cancelled(plain)
    assert list(ladder) == ["results", "headline", "table", "rows"], "those of views.ladder_outputs"
    assert ladder["headline"].startswith("Ladder: Cancelled after 0 of 4 steps") and ladder["rows"] is None
    tune = progress_views.autotune_cancelled(plain)
    assert tune["result"]["cancelled"] and tune["winner"] is None, "no winner"
    assert not tune["apply"]["interactive"] and "Nothing is offered" in tune["summary"]


def test_a_sweeps_progress_reaches_gr_progress_as_a_fraction_and_a_sentence():
    from studio.ui import progress_views

    told = []
    report = progress_views.progress_to(lambda value, desc: told.append((value, desc)), "Compare")
    report(1.5, 12, "configuration 2 of 3 (channels_last), warm-up 1 of 1, step 4 of 8")
    assert told == [(0.125, "Compare: configuration 2 of 3 (channels_last), warm-up 1 of 1, step 4 of 8")]


def test_a_profile_cancelled_while_it_waits_does_not_start_and_one_without_flags_says_it_cannot_stop(studio):
    from studio.ui.handlers.profile import CANNOT_STOP, build_profile_handlers

    cancels = Cancellations()
    handlers = build_profile_handlers(studio, cancels)
    cancels.reserve("api", "profile")  # a client without a session: its Profile was asked for and waits
    assert handlers["profile_cancel"](None).startswith("A Profile waiting in the queue will not start")
    fields = {"model": "tiny-shapes", "prompt": "a red circle", "steps": 3, "width": 32, "height": 32}
    shown = handlers["profile"](**fields)
    assert shown["summary"].startswith("**Profile cancelled before it started** (cancelled by the user)")
    assert [shown[name] for name in ("chart", "ops", "kinds", "record")] == [None] * 4
    assert shown["results"]["visible"]
    assert studio.runlog.runs() == [], "nothing was profiled or logged"
    assert build_profile_handlers(studio)["profile_cancel"](None) == CANNOT_STOP


def test_generates_cancel_leaves_the_compare_waiting_in_the_same_page_and_compares_own_stops_it(studio):
    """Two tabs of one page: Generate's Cancel does not stop the Compare that waits in the queue behind it;
    Compare's own Cancel does, before its first round."""
    from studio.ui.handlers import build_handlers
    from studio.ui.handlers.common import NOTHING_RUNNING
    from studio.ui.handlers.sweeps import STOPPING

    handlers = build_handlers(studio, Cancellations())
    fields = {"model": "tiny-shapes", "prompt": "a red circle", "steps": 2, "width": 32, "height": 32}

    def compare():
        return handlers["compare"](["channels_last"], "", 0, 1, "none", "", **fields)["headline"]

    handlers["compare_reserve"](None)  # a client without a session is "api", as the handlers' None says
    assert handlers["generate_cancel"](None) == NOTHING_RUNNING
    assert "Cancelled" not in compare() and studio.runlog.runs()[-1]["status"] == "ok"
    handlers["compare_reserve"](None)
    assert handlers["compare_cancel"](None) == STOPPING
    assert compare().startswith("**Compare: Cancelled by the user")
    assert handlers["compare_cancel"](None) == NOTHING_RUNNING, "the cancelled run has ended"
