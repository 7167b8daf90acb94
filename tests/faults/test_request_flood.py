"""A flood of requests beyond the queue: each refused at once with a sentence or served, none dropped, the run
log holding exactly the served runs, and the server answering a normal request after."""

from __future__ import annotations

from tests.faults import flood
from tests.faults.cases import Workspace


def test_a_flood_beyond_the_queue_is_served_or_refused_none_dropped(tmp_path):
    outcome = flood.flood_case(Workspace(tmp_path), clients=10)
    facts = outcome.facts
    assert facts["refused"] >= 1 and facts["served"] >= flood.QUEUE, facts["answers"]
    assert outcome.runs_lost == 0, f"dropped: {facts['answers']}"
    assert "Queue is full" in outcome.said and outcome.seconds < 30, "a refused client does not wait"
    assert outcome.alive and facts["logged"] == facts["served"] + 1, "the run log holds the served runs"
