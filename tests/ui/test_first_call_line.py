"""The progress line of a first call that prepares (compiles, converts): it moves each second with what the
preparation is doing, stops at the first denoising step, and in a sweep speaks only while one prepares."""

from __future__ import annotations

import time

from studio.optimizations import compile_activity
from studio.ui import first_call_line


def wait_for(condition, timeout: float = 30.0) -> None:
    """Until `condition()` holds (the line's thread has said it), however busy the machine is."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "the line never said it"
        time.sleep(0.01)


class Lines:
    """A stand-in for gr.Progress that keeps what it was told."""

    def __init__(self) -> None:
        self.said: list[tuple[object, str]] = []

    def __call__(self, value, desc: str = "", unit: str = "") -> None:
        self.said.append((value, desc))


def test_generate_s_line_says_each_phase_with_its_seconds_until_the_first_step(monkeypatch):
    monkeypatch.setattr(first_call_line, "TICK_S", 0.05)
    lines = Lines()
    inductor = "graph 1: lowering it and compiling its kernels (inductor)"
    with first_call_line.until_first_step(lines, expected_s=2.0) as first_step:
        wait_for(lambda: lines.said)
        compile_activity.say(inductor)
        wait_for(lambda: any(inductor in desc for _, desc in lines.said))
        first_step()
        told = len(lines.said)
        time.sleep(0.2)
    compile_activity.clear()
    assert len(lines.said) == told, "nothing is said after the first step"
    words = [desc for _, desc in lines.said]
    assert words[0].startswith("first call: loading / configuring · 0 s of about 2 s")
    assert any("graph 1: lowering it and compiling its kernels (inductor)" in w for w in words)
    shares = [value for value, _ in lines.said]
    assert shares == sorted(shares) and 0 < shares[-1] <= 0.95, "the bar only grows, and never to full"


def test_a_sweep_s_line_speaks_only_while_a_configuration_prepares(monkeypatch):
    monkeypatch.setattr(first_call_line, "TICK_S", 0.05)
    lines = Lines()
    with first_call_line.while_preparing(lines, "Compare"):
        time.sleep(0.2)
        assert lines.said == [], "no preparation, no line: the sweep's own lines show"
        compile_activity.say("tracing the model's code into a graph (dynamo)")
        wait_for(lambda: lines.said)
        compile_activity.clear()
        said = len(lines.said)
        time.sleep(0.3)
    assert said and len(lines.said) <= said + 1, "at most the line a tick was already saying"
    tracing = "tracing the model's code into a graph (dynamo)"
    assert lines.said[0][1] == f"Compare: preparing a first call: {tracing}"
