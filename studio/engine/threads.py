"""How many CPU threads a run uses. On a shared host PyTorch's threads collapse when another process takes a
core (the bundled model on 2 cores with one core busy elsewhere: 2 threads ran ×8.8 slower than quiet, 1
thread ×1.4), and no fixed count is right both quiet and busy. So a CPU run takes the cores that are free
at request time (`measure.host.CORE_WATCH`); a sweep decides once, for all its configurations, so the
comparison stays fair; the `threads` technique still fixes the count for a user who wants one.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator

import torch

from studio.measure.host import CORE_WATCH
from studio.optimizations.runtime import physical_cores
from studio.request import GenerationRequest

FREE_CORES = "cores free at request time"
FIXED = "the threads technique"


_lock = threading.Lock()
_active = 0  # runs inside `using` now (requests run concurrently in a server's threads)
_base = 0  # the process's own count while any run is inside `using`


def _ceiling() -> int:
    """What the process is set to use (`OMP_NUM_THREADS`, `torch.set_num_threads`), runs in flight aside."""
    with _lock:
        return _base if _active else torch.get_num_threads()


def free_threads() -> int:
    """One thread per physical core, less the share of cores other processes keep busy, at least 1 and never
    more than the process is set to use."""
    cores, logical, ceiling = physical_cores(), os.cpu_count() or 1, _ceiling()
    busy = CORE_WATCH.busy_cores()
    if busy is None:
        return min(cores, ceiling)
    return max(1, min(ceiling, round(cores * (1 - min(busy, logical) / logical))))


def choose(request: GenerationRequest) -> int | None:
    """The threads a run of `request` should use, or None to leave them (not a CPU run, or the request
    fixes them with the `threads` technique)."""
    if request.device != "cpu" or "threads" in request.optimizations:
        return None
    return free_threads()


@contextlib.contextmanager
def using(threads: int | None) -> Iterator[None]:
    """Run the block with `threads` intra-op threads (None: as they are). torch's count is process-wide:
    concurrent runs share it (the last to start sets it) and the process's own count comes back when the
    last of them ends."""
    global _active, _base
    if threads is None:
        yield
        return
    with _lock:
        if _active == 0:
            _base = torch.get_num_threads()
        _active += 1
        if torch.get_num_threads() != threads:
            torch.set_num_threads(threads)
    try:
        yield
    finally:
        with _lock:
            _active -= 1
            if _active == 0 and torch.get_num_threads() != _base:
                torch.set_num_threads(_base)


def policy_of(request: GenerationRequest, threads: int | None) -> str | None:
    """What decided a run's threads, in words, for its record."""
    if "threads" in request.optimizations:
        return FIXED
    return FREE_CORES if threads is not None else None
