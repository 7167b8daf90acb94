"""The CPU peer benchmark judges its own targets: the studio's best configuration of a group, against
OpenVINO's row (x1.0) and PyTorch fp32 (x2.0), among those whose image is close enough to fp32's."""

from __future__ import annotations

from benchmarks.cpu_peers import FULL_INT8, KEEPS_THE_MATH_DB, OPTIMUM_HYBRID, WINOGRAD, Row, target_line
from studio.measure import protocol


def row(label: str, vs_fp32: list[float], vs_peer: list[float] | None, psnr_db: float | None) -> Row:
    """A row whose per-round ratios are the given ones (each as reference time over 1 s)."""
    ones = [1.0] * len(vs_fp32)
    return Row(
        label,
        protocol.speedup(vs_fp32, ones),
        protocol.speedup(vs_peer, ones) if vs_peer else None,
        psnr_db,
    )


BASELINE = row("baseline", [1.0, 1.0, 1.0], [0.65, 0.64, 0.66], None)


def test_keeping_the_math_counts_fp32_rounding_and_not_the_peers_own_psnr():
    """Winograd's fp32 is 116.8 dB from PyTorch's, OpenVINO's own 122 dB: both keep the math."""
    rows = [
        BASELINE,
        row("openvino", [1.54, 1.52, 1.56], [1.0, 1.0, 1.0], 122.0),
        row(WINOGRAD, [2.05, 2.01, 2.08], [1.33, 1.30, 1.35], 116.8),
        row("bf16-ish", [2.9, 2.8, 3.0], [1.9, 1.8, 2.0], 50.0),
    ]
    line = target_line(rows, "openvino", KEEPS_THE_MATH_DB)
    assert WINOGRAD in line and "bf16-ish" not in line
    assert "x1.33 (1.30-1.35) vs OpenVINO (>= x1.0: met)" in line
    assert "x2.05 (2.01-2.08) vs PyTorch fp32 (>= x2.0: met)" in line


def test_quantized_needs_the_peers_psnr_or_better_and_says_what_is_not_met():
    rows = [
        BASELINE,
        row(OPTIMUM_HYBRID, [1.93, 1.83, 2.04], [1.0, 1.0, 1.0], 39.4),
        row("int8_static", [2.3, 2.2, 2.4], [1.2, 1.1, 1.3], 30.0),  # faster, but further from fp32
        row(FULL_INT8, [1.95, 1.90, 2.10], [1.02, 1.01, 1.05], 41.6),
    ]
    line = target_line(rows, OPTIMUM_HYBRID, None)
    assert FULL_INT8 in line and "int8_static" not in line and ">= 39.4 dB" in line
    assert (
        "vs OpenVINO (>= x1.0: met)" in line
        and "x1.95 (1.90-2.10) vs PyTorch fp32 (>= x2.0: NOT met)" in line
    )


def test_no_close_enough_configuration_or_no_peer_row_is_said_plainly():
    rows = [BASELINE, row(OPTIMUM_HYBRID, [1.9], [1.0], 39.4), row("int8_static", [2.3], [1.2], 30.0)]
    assert target_line(rows, OPTIMUM_HYBRID, None).startswith("target: not met (no configuration")
    assert (
        target_line(rows[:1], OPTIMUM_HYBRID, None)
        == "target: not judged (the group's OpenVINO row did not run)"
    )
