"""A progress line that moves while a first call prepares (loads, traces, compiles, converts) and nothing is
denoised yet: what the preparation is doing now (`studio.optimizations.compile_activity`), the seconds so
far and, where something measured it before, of how many (`studio.cards.measured_first_calls`).

Generate shows it from the click to the first denoising step (`until_first_step`); a sweep shows it only
while one of its configurations prepares (`while_preparing`), between its own lines. The line is written
from a thread of its own, in the job's context (Gradio finds a job's progress through context variables).
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from studio.optimizations import compile_activity

TICK_S = 1.0


@contextlib.contextmanager
def _ticking(line: Callable[[], tuple[Any, str] | None], progress: Any) -> Iterator[Callable[[], None]]:
    """Call `progress` with `line()`'s (value, words) every second until the block ends or `stop()` is
    called (`line()` None: say nothing this second). Yields `stop`."""
    done, lock = threading.Event(), threading.Lock()

    def tick() -> None:
        while not done.wait(TICK_S):
            with lock:  # a stop and its run's own next line come after this second's line, never before
                said = None if done.is_set() else line()
                if said is not None:
                    progress(said[0], desc=said[1], unit="s")

    def stop() -> None:
        with lock:
            done.set()

    thread = threading.Thread(target=contextvars.copy_context().run, args=(tick,), daemon=True)
    thread.start()
    try:
        yield stop
    finally:
        stop()


def until_first_step(progress: Any, expected_s: float | None) -> contextlib.AbstractContextManager:
    """Generate's line from the click to the first denoising step: 'first call: graph 1: lowering it and
    compiling its kernels (inductor) · 12 s of about 40 s', the bar filled by the share of `expected_s` (at
    most 95%: an estimate is not a promise); without an estimate, the seconds alone. Yields `stop`, which the
    first step's progress calls."""
    worker, started = threading.get_ident(), time.monotonic()

    def line() -> tuple[Any, str]:
        now = compile_activity.of(worker)
        what = now[0] if now and now[1] >= started else "loading / configuring"  # not an earlier run's
        elapsed = time.monotonic() - started
        if expected_s:
            of = f"{elapsed:.0f} s of about {expected_s:.0f} s"
            return min(0.95, elapsed / expected_s), f"first call: {what} · {of}"
        return (round(elapsed), None), f"first call: {what}"

    return _ticking(line, progress)


def while_preparing(progress: Any, job: str) -> contextlib.AbstractContextManager:
    """A sweep's line while one of its configurations prepares: 'Compare: preparing a first call: tracing
    the model's code into a graph (dynamo) · 8 s'; nothing while none does (the sweep's own lines show)."""
    worker, started = threading.get_ident(), time.monotonic()

    def line() -> tuple[Any, str] | None:
        now = compile_activity.of(worker)
        if now is None or now[1] < started:  # nothing, or what an earlier job left said
            return None
        elapsed = round(time.monotonic() - now[1])
        return (elapsed, None), f"{job}: preparing a first call: {now[0]}"

    return _ticking(line, progress)
