"""Records in words: a run's own memory beside the process's peak, what a sweep table's Latency and Speedup
are, the rows where the two disagree, and a configuration as a narrow cell shows it."""

from __future__ import annotations

import pytest

from studio import report

MB = 2**20


def row(**figures):
    """A run-log row of an ok run with the given figures."""
    base = {"id": 7, "status": "ok", "config_label": "baseline", "latency_s": 0.5, "latency_all": [0.5]}
    return {**base, **figures}


def record(config, latency, speedup=None, verdict=None, rounds=3, **extra):
    low, high = (None, None) if speedup is None else (speedup * 0.9, speedup * 1.1)
    return {
        "config": config,
        "status": "ok",
        "latency_s": latency,
        "speedup": speedup,
        "speedup_min": low,
        "speedup_max": high,
        "verdict": verdict,
        "rounds": rounds,
        **extra,
    }


def test_a_runs_own_memory_is_its_weights_plus_the_median_call_not_the_process_peak():
    """After a 4 GB model was loaded, the bundled model's run: 5,361 MB process peak, 25 MB of its own."""
    r = report.log_record(
        row(
            peak_memory=5361 * MB,
            memory_kind="cpu_rss",
            memory_resident=13 * MB,
            memory_added_all=[10 * MB, 12 * MB, 40 * MB],
            memory_added=40 * MB,
        )
    )
    assert (r["peak_memory_mb"], r["run_memory_mb"], r["weights_mb"]) == (5361.0, 25.0, 13.0)
    assert report.run_memory(r) == "25 MB (weights 13 MB + 12 MB during the call)"
    assert report.memory(r) == "5,361 MB"


@pytest.mark.parametrize(
    "figures",
    [
        {"memory_added_all": [10 * MB], "memory_added": 10 * MB},  # logged before the weights were recorded
        {"memory_resident": 13 * MB},  # no call measured (a failed run)
        {},
    ],
)
def test_a_run_without_both_figures_has_no_own_memory(figures):
    r = report.log_record(row(**figures))
    assert r["run_memory_mb"] is None and r["weights_mb"] is None
    assert report.run_memory(r) == "–"


def test_the_new_memory_keys_are_in_every_record_and_the_csv():
    assert {"run_memory_mb", "weights_mb"} <= set(report.failed_record("bf16", "no"))
    header = report.to_csv([report.log_record(row())]).splitlines()[0].split(",")
    assert header.index("peak_memory_mb") < header.index("run_memory_mb") < header.index("weights_mb")


def test_a_configuration_breaks_after_each_plus_and_a_range_stays_whole():
    cell = report.breakable("bf16+channels_last+openvino[mode=full_int8,vae_int8=true]")
    assert cell.replace("\u200b", "") == "bf16+channels_last+openvino[mode=full_int8,vae_int8=true]"
    assert cell.count("\u200b") == 3 and "+\u200bchannels_last" in cell
    assert report.breakable("×1.09 (0.95–1.20)") == "×1.09 (0.95\u2060–\u20601.20)"


def test_a_point_is_named_with_its_x_value():
    assert report.point_name(record("deepcache[interval=2]", 1.0)) == "deepcache[interval=2]"
    point = record("deepcache[interval=2]", 1.0, axis="steps", x="4")
    assert report.point_name(point) == "deepcache[interval=2] at steps=4"


def test_the_speedup_column_and_the_legend_say_how_many_rounds():
    records = [record("baseline", 1.0, verdict="baseline", rounds=5), record("bf16", 0.8, 1.25, "faster", 5)]
    assert report.speedup_title(records) == "Speedup (range), median of 5 rounds"
    assert report.speedup_title([record("a", 1.0, rounds=1)]) == "Speedup (range), median of 1 round"
    assert report.speedup_title([report.failed_record("bf16", "no")]) == "Speedup (range)"
    legend = report.figures_legend(records)
    assert "median of each configuration's own 5 timed calls" in legend
    assert "median of its 5 per-round ratios" in legend and "not the ratio of the two latencies" in legend


def test_a_row_whose_latency_and_speedup_disagree_is_named():
    """The busy host's row: 4.76 s against the baseline's 4.59 s, and ×0.32 from the rounds."""
    records = [
        record("baseline", 4.59, verdict="baseline"),
        record("deepcache[interval=2]", 4.76, 0.32, "slower"),
        record("channels_last", 4.10, 1.10, "within noise"),  # 4.59 / 4.10 = ×1.12: the same story
        report.failed_record("bf16", "out of memory"),
    ]
    [sentence] = report.disagreements(records)
    assert sentence.startswith("⚠ deepcache[interval=2]: its median latency against the baseline's")
    assert "(4.76 s vs 4.59 s) reads ×0.96" in sentence and "per-round ratios ×0.32" in sentence


def test_opposite_sides_of_one_disagree_even_when_close():
    records = [record("baseline", 1.0, verdict="baseline"), record("sdpa", 0.95, 0.97, "within noise")]
    assert len(report.disagreements(records)) == 1, "latencies say ×1.05 faster, the rounds ×0.97 slower"


def test_in_an_xy_sweep_each_point_is_held_against_the_baseline_at_its_x():
    records = [
        record("baseline", 1.0, verdict="baseline", axis="steps", x="2"),
        record("baseline", 2.0, verdict="baseline", axis="steps", x="4"),
        record("bf16", 0.5, 2.0, "faster", axis="steps", x="2"),
        record("bf16", 1.0, 2.0, "faster", axis="steps", x="4"),  # 2.0 / 1.0 at its own X: agrees
        record("sdpa", 1.9, 2.0, "faster", axis="steps", x="4"),  # 2.0 / 1.9 = ×1.05 against ×2.0
    ]
    assert [s.split(":")[0] for s in report.disagreements(records)] == ["⚠ sdpa at steps=4"]
    assert report.disagreements([records[2]]) == [], "no baseline, nothing to hold it against"
