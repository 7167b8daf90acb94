"""The engine: one run of a request, from a checked request to a logged result.

`Studio` (in `core`) is the one door the faces use: generate, profile, estimate, history, the speed timeline,
the database copy and sharding all go through it. Its parts: `run_data` (the values a run and a profile carry
and their run-log columns), `run_history` (what a visitor may read and take of the run log), `memory_estimate`
(will it fit, before a run), `memory_advice` (what to try after an out-of-memory), `first_call` (a first
call's cost, from the run log), `speed_timeline` (a configuration's speed across library versions), `zerogpu`
(the GPU allocation on a ZeroGPU Space) and `shard` (a sharded copy of a model's weights).
"""

from __future__ import annotations

from typing import Any

__all__ = ["Studio", "compute_run"]


def __getattr__(name: str) -> Any:
    """`Studio` and its functions, imported on first use: `studio.engine.zerogpu` must import without torch
    (a ZeroGPU Space imports `spaces` before anything touches CUDA)."""
    if name in __all__:
        from studio.engine import core

        return getattr(core, name)
    raise AttributeError(f"module 'studio.engine' has no attribute {name!r}")
