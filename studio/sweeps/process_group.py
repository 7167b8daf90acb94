"""The process group of a distributed sweep, as one process sees it.

Joining it (gloo on CPU hosts, the accelerator's backend otherwise), where this process runs and how many
torch threads it gets, and the collective calls that keep every process in step: a refusal of the input
that every process prints, and one random seed drawn for all of them.
"""

from __future__ import annotations

import logging
import os
import random
import socket
import sys
from typing import Any

import torch
from accelerate import PartialState
from accelerate.utils import broadcast_object_list, gather_object

from studio.request import MAX_SEED

log = logging.getLogger("studio.distributed")


def join_process_group(device: str) -> PartialState:
    """Join the process group: gloo on CPU hosts (or with --device cpu), the accelerator's backend
    otherwise."""
    use_cpu = (
        device == "cpu"
        or not torch.cuda.is_available()
        or os.environ.get("ACCELERATE_USE_CPU", "").lower() in ("1", "true")
    )
    state = PartialState(cpu=use_cpu)
    if state.num_processes == 1 and os.environ.get("ACCELERATE_USE_CPU", "").lower() == "true":
        log.warning(
            "one process only: `accelerate launch --cpu` starts a single process unless given an MPI "
            "hostfile; "
            "use `accelerate launch --multi_gpu --num_processes N` or `torchrun --nproc_per_node N`"
        )
    return state


def placement(state: PartialState, threads: int | None) -> dict[str, Any]:
    """Set this process's torch threads to its share of the machine's cores; return where it runs."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    local = int(os.environ.get("LOCAL_WORLD_SIZE") or state.num_processes)
    threads = threads or max(1, cores // local)
    torch.set_num_threads(threads)
    device = f"cuda:{state.device.index or 0}" if state.device.type == "cuda" else "cpu"
    return {
        "rank": state.process_index,
        "local_rank": state.local_process_index,
        "world_size": state.num_processes,
        "host": socket.gethostname(),
        "device": device,
        "torch_threads": threads,
        "backend": state.backend,
    }


def any_refused(state: PartialState, error: str | None) -> bool:
    """Whether any process refused the input; if so every process prints every reason (collective call)."""
    errors = list(dict.fromkeys(e for e in gather_object([error]) if e))
    if errors:
        sys.stderr.write(f"error: {' '.join(errors)}\n")  # one write: the processes' lines do not interleave
        sys.stderr.flush()
        # nobody exits (and gets its peers killed by the launcher) before all have printed
        state.wait_for_everyone()
    return bool(errors)


def shared_seed(seed: int) -> int:
    """Seed -1 means random: the main process draws it for everybody."""
    if seed != -1:
        return seed
    return broadcast_object_list([random.randint(0, MAX_SEED)])[0]
