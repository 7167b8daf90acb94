"""The cold-start benchmark's verdicts: the median warm process out of several (with the range of their first
calls), and OpenVINO full int8's warm-start target, which a configuration only meets with a warm first call
within 8 s and without compiling again."""

from __future__ import annotations

from benchmarks import cold_start


def _start(first: float, phase: str = "warm") -> dict:
    return {
        "first_s": first,
        "steady_s": 3.0,
        "ratio": first / 3.0,
        "phase": phase,
        "prepare_s": 2.9,
        "load_s": 5.0,
        "process_s": 20.0,
    }


def test_the_median_process_is_reported_with_the_range_of_the_first_calls():
    warm = cold_start.median_start([_start(s) for s in (9.1, 6.6, 7.2, 6.9, 6.7)])
    assert (warm["first_s"], warm["first_min_s"], warm["first_max_s"], warm["processes"]) == (
        6.9,
        6.6,
        9.1,
        5,
    )
    line = cold_start._line("sd15-arch", "openvino[mode=full_int8]", "warm", warm)
    assert "6.90 s (median of 5, 6.60–9.10 s; warm, 2.90 s of it)" in line


def test_openvino_full_int8_meets_its_warm_start_target_only_within_8_s_and_warm():
    results = {
        "openvino[mode=full_int8]": {
            "warm": cold_start.median_start([_start(8.6), _start(8.5), _start(9.2)])
        },
        "openvino[mode=full_int8,vae_int8=true]": {"warm": cold_start.median_start([_start(6.9)])},
        "openvino[mode=full_int8,vae=false]": {"warm": _start(4.0, phase="cold")},
        "openvino": {"warm": _start(3.0)},
        "aot_package": {"warm": _start(3.0, phase="package")},
    }
    lines = cold_start.openvino_targets("sd15-arch", results)
    assert lines == [
        "target: openvino[mode=full_int8] warm first call <= 8 s: 8.60 s (8.50–9.20 s), phase warm (not met)",
        "target: openvino[mode=full_int8,vae_int8=true] warm first call <= 8 s: 6.90 s, phase warm (met)",
        "target: openvino[mode=full_int8,vae=false] warm first call <= 8 s: 4.00 s, phase cold (not met)",
    ]
    assert cold_start.openvino_targets("tiny-shapes", results) == [], "the target is sd15-arch's"
