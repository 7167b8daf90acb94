"""Runtime settings around a call: the number of CPU threads torch uses.

`torch.set_num_threads` is process-wide, so it is set for the duration of the pipeline
call and restored afterwards. Inter-op threads cannot follow: torch only lets
`set_num_interop_threads` be called once, before any parallel work, so they stay at what
the process started with (PyTorch's default: the number of physical cores).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass

import psutil
import torch

from studio import checks
from studio.optimizations.base import Context, Optimization, Settings, register
from studio.optimizations.facts import NO_MEMORY_EFFECT


def physical_cores() -> int:
    """Physical CPU cores (logical ones when that is unknown), at least 1."""
    return psutil.cpu_count(logical=False) or os.cpu_count() or 1


def max_threads() -> int:
    """The most threads a request may ask for: four per logical CPU."""
    return (os.cpu_count() or 1) * 4


def thread_counts() -> tuple[dict[str, int], ...]:
    """The thread counts the auto-tuner tries: one, one per physical core, one per logical CPU."""
    return tuple({"num_threads": n} for n in sorted({1, physical_cores(), os.cpu_count() or 1}))


@dataclass(frozen=True)
class ThreadsSettings(Settings):
    """`num_threads`: torch's intra-op threads for the run (default: one per physical core)."""

    num_threads: int = physical_cores()

    def __post_init__(self) -> None:
        self._set("num_threads", checks.whole("threads num_threads", self.num_threads, 1, max_threads()))


@contextlib.contextmanager
def num_threads(ctx: Context) -> Iterator[None]:
    """Run the block with the request's `num_threads` intra-op threads (default: physical cores)."""
    wanted = ctx.settings("threads").num_threads
    old = torch.get_num_threads()
    torch.set_num_threads(int(wanted))
    try:
        yield
    finally:
        torch.set_num_threads(old)


register(
    Optimization(
        name="threads",
        label="CPU threads",
        group="speed",
        description=(
            "Set how many CPU threads torch uses for this run (default: one per physical core), restored "
            "afterwards; process-wide, so concurrent runs share the setting."
        ),
        stage="call",
        call_context=num_threads,
        settings=ThreadsSettings,
        autotune="candidate",
        grid=thread_counts,
        presets=(),
        ladder_rung=None,
        memory_effect=NO_MEMORY_EFFECT,
    )
)
