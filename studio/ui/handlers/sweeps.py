"""The sweeps' handlers: `/compare` (with an optional X axis), `/ladder`, `/autotune`, applying an
auto-tune winner in Generate, and the Cancel of these tabs.

Each sweep reports where it is through `gr.Progress` ("Compare: configuration 2 of 3 (channels_last), round 1
of 3, step 7 of 20"); a cancelled one shows what it measured until then (`studio.ui.progress_views`).

Each sweep names its own settings and takes the request's fields by name (`**fields`, read by
`form_request`: a sweep's baseline is fp32 with no technique); the tabs pass their components with
`inputs_kwargs`, so the API's parameters carry those names. Each returns what it fills by name (`COMPARE`,
`LADDER`, `AUTOTUNE`, `APPLY`: the tabs name their components the same, `studio.ui.views.named`)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import gradio as gr
import pandas as pd

from studio import report
from studio.engine import Studio
from studio.errors import Cancelled
from studio.request import PRECISIONS, GenerationRequest, validate_counts
from studio.request.axes import parse_axes
from studio.request.sweep_limits import AutotuneSettings
from studio.sweeps import autotune as autotune_mod
from studio.sweeps import ladder as ladder_mod
from studio.sweeps.compare import run_compare
from studio.sweeps.xy import run_xy
from studio.ui import first_call_line, progress_views, views, xy_views
from studio.ui.cancel import Cancellations
from studio.ui.handlers.common import (
    TECHNIQUE_BOXES,
    cancel_controls,
    cancellable_run,
    engine_errors,
    form_request,
    optional_fields,
    ticked_by_group,
)

STOPPING = "Stopping at the next denoising step: what was measured so far will be shown below."
# What each sweep fills, by name, in the order of its endpoint's outputs (a client's tuple is this order,
# less the layout and State entries: `results`, `pairs`, `xy_results`, `winner`).
COMPARE = (
    "results",
    "headline",
    "gallery",
    "table",
    "details",
    "latency_chart",
    "slider_choice",
    "slider",
    "pairs",
    "csv",
    "markdown",
    *xy_views.XY,
    "rows",
)
LADDER = ("results", "headline", "table", "rows")
AUTOTUNE = ("results", "summary", "table", "quality_plot", "memory_plot", "result", "winner", "apply")
# Generate's fields an auto-tune winner fills: its precision, technique boxes and settings, the steps, size
# and batch it was measured at, and the tab shown.
APPLY = ("precision", *TECHNIQUE_BOXES, "settings", "steps", "width", "height", "batch", "tabs")


def named(names: tuple[str, ...], values: tuple | list) -> dict[str, Any]:
    """A view's outputs (`studio.ui.views`, `studio.ui.progress_views`: in `names`' order) by name."""
    return dict(zip(names, values, strict=True))


MEMORY_TITLE = "Latency (s) vs peak memory (MB, from zero)"


def memory_plot(points: pd.DataFrame | None, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Auto-tune's latency-against-memory plot, its memory axis from zero to a little above the highest
    point (a spread of a few MB does not fill it), and when every point lies within what the memory probe
    resolves (`rows`' kind), a title that says the memory is the same within that."""
    kind = next((r["memory_kind"] for r in rows if r.get("memory_kind")), None)
    memory = points["peak_memory_mb"].dropna() if points is not None else pd.Series(dtype=float)
    if kind is None or memory.empty:
        return gr.update(value=points, title=MEMORY_TITLE)
    resolves = report.MEMORY_RESOLUTION_MB[kind]
    low, high = float(memory.min()), float(memory.max())
    top = [0, round(high * 1.15 + 1)]
    if high - low >= resolves:
        return gr.update(value=points, title=MEMORY_TITLE, y_lim=top)
    probe = "RSS" if kind == "cpu_rss" else "the CUDA allocator"
    span = f"{low:.0f} MB" if round(low) == round(high) else f"{low:.0f}–{high:.0f} MB"
    said = f"Peak memory: the same within the {resolves:.0f} MB {probe} resolves ({span})"
    return gr.update(value=points, title=said, y_lim=top)


def measured_at(winner: dict[str, Any] | None, request: GenerationRequest) -> dict[str, Any] | None:
    """An auto-tune winner with the steps, size and batch it was measured at (Generate runs the same)."""
    if winner is None:
        return None
    shape = {"steps": request.steps, "width": request.width, "height": request.height}
    return {**winner, **shape, "batch": request.batch}


def build_sweep_handlers(studio: Studio, cancels: Cancellations) -> dict[str, Callable]:
    """The sweeps' event functions, closed over one Studio and the sessions' cancel flags."""

    @optional_fields
    @engine_errors
    def compare(
        presets,
        custom_configs,
        warmup,
        rounds,
        axis,
        axis_values,
        y_axis=None,
        y_values="",
        request: gr.Request = None,
        progress=gr.Progress(),
        **fields,
    ):
        """Compare configurations with the baseline (fp32, no technique) in interleaved timed rounds, over an
        optional X axis (steps, size, scheduler, batch, seed, prompt, lora or a technique setting) and Y axis
        (of the same kinds: a grid of X x Y images per configuration)."""
        # first: it takes the flag a click reserved
        with cancellable_run(cancels, request, "compare") as should_stop:
            req = form_request(fields)
            configs = list(presets or []) + [
                c.strip() for c in (custom_configs or "").splitlines() if c.strip()
            ]
            counts = validate_counts(warmup, rounds)
            x_axis, y = parse_axes(axis, axis_values, y_axis, y_values, req)
            options = {
                "warmup": counts.warmup,
                "rounds": counts.rounds,
                "progress": progress_views.progress_to(progress, "Compare"),
                "should_stop": should_stop,
            }
            try:
                with first_call_line.while_preparing(progress, "Compare"):
                    if x_axis is not None:
                        return xy_views.xy_outputs(run_xy(studio, req, configs, x_axis, y, **options))
                    return named(COMPARE, views.compare_outputs(run_compare(studio, req, configs, **options)))
            except Cancelled as exc:
                return named(COMPARE, progress_views.compare_cancelled(exc))

    @optional_fields
    @engine_errors
    def run_ladder(warmup, rounds, request: gr.Request = None, progress=gr.Progress(), **fields):
        """The diffusers documentation's speed ladder on this machine: each step adds one technique to the
        previous ones, all timed in interleaved rounds against the baseline."""
        with cancellable_run(cancels, request, "ladder") as should_stop:
            req = form_request(fields)
            counts = validate_counts(warmup, rounds)
            try:
                _, records = ladder_mod.run_ladder(
                    studio,
                    req,
                    warmup=counts.warmup,
                    rounds=counts.rounds,
                    progress=progress_views.progress_to(progress, "Ladder"),
                    should_stop=should_stop,
                )
            except Cancelled as exc:
                return named(LADDER, progress_views.ladder_cancelled(exc))
        shown = {"headline": views.headline(records), "table": views.ladder_table(records), "rows": records}
        return {"results": gr.update(visible=True), **shown}

    @optional_fields
    @engine_errors
    def autotune(
        techniques,
        include_compile,
        min_psnr,
        min_ssim,
        fidelity_drop,
        warmup,
        rounds,
        confirm_rounds,
        request: gr.Request = None,
        progress=gr.Progress(),
        **fields,
    ):
        """The fastest configuration whose image stays within a quality floor of the baseline's, confirmed
        against it in interleaved rounds."""
        with cancellable_run(cancels, request, "autotune") as should_stop:
            req = form_request(fields)
            settings = AutotuneSettings.of(locals())
            progress_to = progress_views.progress_to(progress, "Auto-tune")
            try:
                result = autotune_mod.run_with(
                    studio, req, settings, progress=progress_to, should_stop=should_stop
                )
            except Cancelled as exc:
                shown = named(AUTOTUNE, progress_views.autotune_cancelled(exc))
                rows = shown["result"]["rows"]
                return {**shown, "memory_plot": memory_plot(shown["memory_plot"], rows)}
            shown = named(AUTOTUNE, views.autotune_outputs(result))
            winner = measured_at(shown["winner"], req)
            return {**shown, "memory_plot": memory_plot(shown["memory_plot"], result.rows), "winner": winner}

    def apply_winner(winner):
        """The whole winner in Generate: precision, techniques by group and their settings, and the steps,
        size and batch it was measured at; Generate shown."""
        winner = winner or {}
        optimizations = winner.get("techniques", [])
        keep = gr.update()
        return {
            "precision": next((o for o in optimizations if o in PRECISIONS), "fp32"),
            **dict(zip(TECHNIQUE_BOXES, ticked_by_group(optimizations), strict=True)),
            "settings": json.dumps(winner["settings"]) if winner.get("settings") else "",
            **{name: winner.get(name, keep) for name in ("steps", "width", "height", "batch")},
            "tabs": gr.update(selected="generate"),
        }

    return {
        "compare": compare,
        "ladder": run_ladder,
        "autotune": autotune,
        "apply_winner": apply_winner,
        **cancel_controls(cancels, "compare", STOPPING),
        **cancel_controls(cancels, "ladder", STOPPING),
        **cancel_controls(cancels, "autotune", STOPPING),
    }
