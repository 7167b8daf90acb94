"""How many CPU threads a run uses. On a shared host PyTorch's threads collapse when another process takes a
core (the bundled model on 2 cores with one core busy elsewhere: 2 threads ran ×8.8 slower than quiet, 1
thread ×1.4), and no fixed count is right both quiet and busy. So a CPU run takes the cores that are free
at request time (`measure.host.CORE_WATCH`); a sweep decides once, for all its configurations, so the
comparison stays fair; the `threads` technique still fixes the count for a user who wants one.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import torch

from studio.measure.host import CORE_WATCH
from studio.optimizations.runtime import physical_cores
from studio.request import GenerationRequest

FREE_CORES = "cores free at request time"
FIXED = "the threads technique"


def free_threads() -> int:
    """One thread per physical core, less the share of cores other processes keep busy, at least 1 and never
    more than the process is set to use (`OMP_NUM_THREADS`, `torch.set_num_threads`)."""
    cores, logical, ceiling = physical_cores(), os.cpu_count() or 1, torch.get_num_threads()
    busy = CORE_WATCH.busy_cores()
    if busy is None:
        return min(cores, ceiling)
    return max(1, min(ceiling, round(cores * (1 - min(busy, logical) / logical))))


def choose(request: GenerationRequest) -> int | None:
    """The threads a run of `request` should use, or None to leave them (not a CPU run, or the request
    fixes them with the `threads` technique)."""
    if request.device != "cpu" or "threads" in request.opts:
        return None
    return free_threads()


@contextlib.contextmanager
def using(threads: int | None) -> Iterator[None]:
    """Run the block with `threads` intra-op threads (None: as they are), restored afterwards."""
    if threads is None:
        yield
        return
    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def policy_of(request: GenerationRequest, threads: int | None) -> str | None:
    """What decided a run's threads, in words, for its record."""
    if "threads" in request.opts:
        return FIXED
    return FREE_CORES if threads is not None else None
