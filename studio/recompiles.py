"""Recompile storms: how many graphs (traces, compilations) a live pipeline's UNet has built, and the
warning when a run builds one more on a pipeline that has built too many already (one per new input shape).
"""

from __future__ import annotations

from typing import Any

RECOMPILE_STORM = 3  # graph builds (traces, compilations) of one live pipeline before it is called a storm


def graph_builds(stats: dict[str, Any]) -> int:
    """How many times the live pipeline's UNet was traced or compiled (one per new input shape)."""
    return int(stats.get("trace_count") or 0) + int(stats.get("compile_count") or 0)


def storm_warnings(stats: dict[str, Any]) -> list[str]:
    """A recompile storm: this run built a new graph, and the pipeline has built too many already."""
    total = graph_builds(stats)
    if not stats.get("graph_builds_this_run") or total <= RECOMPILE_STORM:
        return []
    return [
        f"Recompile storm: the UNet of this pipeline has been traced/compiled {total} times, once per new "
        "input "
        "shape (size, batch, guidance on/off), and each build costs far more than a step. Keep one size per "
        "traced or compiled configuration, or leave jit_trace_unet/torch_compile off while exploring sizes."
    ]


def lora_warnings(stats: dict[str, Any]) -> list[str]:
    """A compiled denoiser built a graph again because the run's LoRA files differ from the last run's: a
    change of scale is set in place (hot-swap), another file changes the layers the graph was built over."""
    if not stats.get("graph_builds_this_run") or not stats.get("lora_files_changed"):
        return []
    return [
        "This run compiled the denoiser again: its LoRA files are not the last run's (another file, or LoRAs "
        "put on or taken off), and a compiled graph holds the layers it was built over. A change of scale "
        "alone is set in place and compiles nothing: keep one set of LoRA files per compiled configuration "
        "and sweep their strengths (the X axis lora)."
    ]
