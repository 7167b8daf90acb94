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

import psutil
import torch

from studio.optimizations.base import Context, Optimization, register


def physical_cores() -> int:
    """Physical CPU cores (logical ones when that is unknown), at least 1."""
    return psutil.cpu_count(logical=False) or os.cpu_count() or 1


def max_threads() -> int:
    """The most threads a request may ask for: four per logical CPU."""
    return (os.cpu_count() or 1) * 4


@contextlib.contextmanager
def num_threads(ctx: Context) -> Iterator[None]:
    """Run the block with `ctx.params["threads"]["num_threads"]` intra-op threads (default: physical cores)."""
    wanted = ctx.params.get("threads", {}).get("num_threads") or physical_cores()
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
            "Set how many CPU threads torch uses for this run (default: one per physical core), restored afterwards; "
            "process-wide, so concurrent runs share the setting."
        ),
        stage="call",
        call_context=num_threads,
        params={"num_threads": physical_cores()},
    )
)
