"""Did it get slower? A configuration's logged runs on this machine, grouped by the library versions they ran
under: an upgrade is marked, and judged slower or faster only beyond both sides' spreads."""

from __future__ import annotations

import json

import pytest

from studio import devices
from studio.engine import speed_timeline
from studio.request import build_request

pytestmark = pytest.mark.usefixtures("one_torch_thread")

SMALL = dict(model="tiny-shapes", prompt="a red circle", steps=2, width=32, height=32, seed=1)


def _upgrade(studio, run_ids, torch_version, latency=None, low=None, high=None):
    """Rewrite logged runs as if they had run under another torch (and, given, with other timings)."""
    for run_id in run_ids:
        row = studio.runlog.get_run(run_id)
        fields = {"versions": json.dumps({**row["versions"], "torch": torch_version})}
        if latency is not None:
            fields.update(latency_s=latency, latency_min=low, latency_max=high)
        studio.runlog.db["runs"].update(run_id, fields)


def test_an_upgrade_is_marked_and_a_change_beyond_both_spreads_is_called_slower(studio):
    request = build_request(**SMALL, optimizations=["channels_last"])
    ids = [studio.generate(request, rounds=2).run_id for _ in range(4)]
    studio.generate(build_request(**SMALL), rounds=2)  # another configuration: not on this timeline
    _upgrade(studio, ids[:2], "2.12.0", latency=0.10, low=0.09, high=0.11)
    _upgrade(studio, ids[2:], "2.13.0", latency=0.30, low=0.29, high=0.31)
    hardware = devices.detect().summary()

    eras = studio.timeline(request, hardware)

    assert [e.runs for e in eras] == [tuple(ids[:2]), tuple(ids[2:])]
    assert eras[0].verdict is None and eras[0].versions["torch"] == "2.12.0"
    assert (eras[1].changed, eras[1].verdict, eras[1].change_pct) == (("torch",), "slower", 200.0)
    block = speed_timeline.markdown(request, eras, "this machine")
    assert "**torch 2.13.0**" in block and "slower (+200.0%)" in block and "not interleaved" in block


def test_a_change_inside_the_spreads_is_within_noise_and_another_machines_runs_are_left_out(studio):
    request = build_request(**SMALL)
    ids = [studio.generate(request, rounds=2).run_id for _ in range(3)]
    _upgrade(studio, ids[:1], "2.12.0", latency=0.20, low=0.10, high=0.30)
    _upgrade(studio, ids[1:], "2.13.0", latency=0.22, low=0.21, high=0.23)
    other = {**devices.detect().summary(), "cpu_name": "AMD EPYC (family 25 model 1)"}

    eras = studio.timeline(request, devices.detect().summary())

    assert [e.verdict for e in eras] == [None, "within noise"]
    assert eras[0].spread_s == pytest.approx(0.20), "one run: its own timed calls' spread"
    assert studio.timeline(request, other) == []
