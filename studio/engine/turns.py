"""Runs take turns on a device, first come first served: one run computes at a time on each device, and a run
that asks while another computes goes next, before the computing sweep's own next run.

A sweep (Compare, the ladder, the auto-tuner) is one job of many runs. On a public studio two jobs may be
under way at once (`studio.ui.widgets.generation_concurrency`), and each of their runs takes a turn here:
another visitor's single Generate waits behind at most the run computing now, not the whole sweep, and no two
runs ever share the device (each is timed alone). A thread already holding the turn takes it again freely.
"""

from __future__ import annotations

import collections
import contextlib
import threading
from collections.abc import Iterator

_lock = threading.Condition()
_waiting: dict[str, collections.deque[object]] = collections.defaultdict(collections.deque)
_holder: dict[str, tuple[int, int]] = {}  # device -> (thread id, depth)


@contextlib.contextmanager
def turn(device: str) -> Iterator[None]:
    """Hold `device`'s turn for the block, waiting behind the runs that asked before."""
    me = threading.get_ident()
    with _lock:
        held = _holder.get(device)
        if held is not None and held[0] == me:
            _holder[device] = (me, held[1] + 1)
        else:
            ticket = object()
            _waiting[device].append(ticket)
            _lock.wait_for(lambda: device not in _holder and _waiting[device][0] is ticket)
            _waiting[device].popleft()
            _holder[device] = (me, 1)
    try:
        yield
    finally:
        with _lock:
            thread, depth = _holder[device]
            if depth > 1:
                _holder[device] = (thread, depth - 1)
            else:
                del _holder[device]
                _lock.notify_all()
