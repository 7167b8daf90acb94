"""What a first call's preparation is doing now, for a progress line that moves while nothing is denoised yet:
dynamo tracing the denoiser, inductor lowering a graph and compiling its kernels, a package exported,
compiled and loaded.

Each thread that prepares something says so here (`say`); a progress line of the same job reads its newest
words (`of`). Dynamo's own start and end of a frame's compile are hooked once per process (`watch_dynamo`), so
the tracing phase is said even before the backend is called.
"""

from __future__ import annotations

import threading
import time

_NOW: dict[int, tuple[str, float]] = {}  # thread id -> (what it is doing, since: time.monotonic())
_LOCK = threading.Lock()
_WATCHING = False


def say(what: str) -> None:
    """This thread now does `what` ("graph 1: lowering and compiling its kernels (inductor)")."""
    with _LOCK:
        _NOW[threading.get_ident()] = (what, time.monotonic())


def clear() -> None:
    """This thread prepares nothing any more."""
    with _LOCK:
        _NOW.pop(threading.get_ident(), None)


def of(thread: int) -> tuple[str, float] | None:
    """What `thread` is preparing now and since when (time.monotonic()), or None."""
    with _LOCK:
        return _NOW.get(thread)


def watch_dynamo() -> None:
    """Say dynamo's tracing of each frame it compiles, and clear at its end (once per process)."""
    global _WATCHING
    with _LOCK:
        if _WATCHING:
            return
        _WATCHING = True
    from torch._dynamo.callback import callback_handler

    callback_handler.register_start_callback(lambda _: say("tracing the model's code into a graph (dynamo)"))
    callback_handler.register_end_callback(lambda _: clear())
