"""The sweeps' handlers: `/compare` (with an optional X axis), `/ladder`, `/autotune`, applying an
auto-tune winner in Generate, and the Cancel of these tabs.

Each sweep reports where it is through `gr.Progress` ("Compare: configuration 2 of 3 (channels_last), round 1
of 3, step 7 of 20"); a cancelled one shows what it measured until then (`studio.ui.progress_views`).

Each sweep names its own settings and takes the request's fields by name (`**fields`, read by
`form_request`: a sweep's baseline is fp32 with no technique); the tabs pass their components with
`inputs_kwargs`, so the API's parameters carry those names."""

from __future__ import annotations

import json
from collections.abc import Callable

import gradio as gr

from studio.engine import Studio
from studio.errors import Cancelled
from studio.request import PRECISIONS, parse_opts, validate_autotune, validate_counts
from studio.request.axes import parse_axis
from studio.sweeps import ladder as ladder_mod
from studio.sweeps.autotune import run_autotune
from studio.sweeps.autotune_search_space import floor_of
from studio.sweeps.compare import run_compare
from studio.sweeps.xy import run_xy
from studio.ui import progress_views, views, xy_views
from studio.ui.cancel import Cancellations
from studio.ui.handlers.common import (
    engine_errors,
    form_request,
    optional_fields,
    session_of,
    stop_check,
    ticked_by_group,
)

STOPPING = "Stopping at the next denoising step: what was measured so far will be shown below."


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
        request: gr.Request = None,
        progress=gr.Progress(),
        **fields,
    ):
        """Compare configurations with the baseline (fp32, no technique) in interleaved timed rounds, over an
        optional X axis (steps, size, scheduler, batch or a technique setting)."""
        should_stop = stop_check(cancels, request)  # first: it takes the flag a click reserved
        req = form_request(fields)
        configs = list(presets or []) + [c.strip() for c in (custom_configs or "").splitlines() if c.strip()]
        counts = validate_counts(warmup, rounds)
        x_axis = parse_axis(axis, axis_values, req)
        options = {
            "warmup": counts.warmup,
            "rounds": counts.rounds,
            "progress": progress_views.progress_to(progress, "Compare"),
            "should_stop": should_stop,
        }
        try:
            if x_axis is not None:
                return xy_views.xy_outputs(run_xy(studio, req, configs, x_axis, **options))
            return views.compare_outputs(run_compare(studio, req, configs, **options))
        except Cancelled as exc:
            return progress_views.compare_cancelled(exc)

    @optional_fields
    @engine_errors
    def run_ladder(warmup, rounds, request: gr.Request = None, progress=gr.Progress(), **fields):
        """The diffusers documentation's speed ladder on this machine: each step adds one technique to the
        previous ones, all timed in interleaved rounds against the baseline."""
        should_stop = stop_check(cancels, request)
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
            return progress_views.ladder_cancelled(exc)
        return gr.update(visible=True), views.headline(records), views.ladder_table(records), records

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
        should_stop = stop_check(cancels, request)
        req = form_request(fields)
        checked = validate_autotune(
            min_psnr=min_psnr,
            min_ssim=min_ssim,
            fidelity_drop=fidelity_drop,
            warmup=warmup,
            repeats=rounds,
            confirm_rounds=confirm_rounds,
        )
        try:
            result = run_autotune(
                studio,
                req,
                floor=floor_of(checked),
                techniques=parse_opts(techniques) or None,
                include_compile=bool(include_compile),
                warmup=checked.warmup,
                repeats=checked.repeats,
                confirm_rounds=checked.confirm_rounds,
                should_stop=should_stop,
                progress=progress_views.progress_to(progress, "Auto-tune"),
            )
        except Cancelled as exc:
            return progress_views.autotune_cancelled(exc)
        return views.autotune_outputs(result)

    def apply_winner(winner):
        """The whole winner in Generate: precision, techniques by group and their settings; Generate shown."""
        winner = winner or {}
        opts = winner.get("techniques", [])
        precision = next((o for o in opts if o in PRECISIONS), "fp32")
        settings = json.dumps(winner.get("settings") or {}) if winner.get("settings") else ""
        return [precision, *ticked_by_group(opts), settings, gr.update(selected="generate")]

    def cancel_job(request: gr.Request):
        """The Cancel of Compare, Ladder and Auto-tune: stops the session's run at its next denoising step
        (and one it asked for that waits in the queue)."""
        return STOPPING if cancels.cancel(session_of(request)) else "Nothing is running."

    return {
        "compare": compare,
        "ladder": run_ladder,
        "autotune": autotune,
        "apply_winner": apply_winner,
        "cancel_job": cancel_job,
    }
