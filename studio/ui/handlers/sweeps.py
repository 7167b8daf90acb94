"""The sweeps' handlers: `/compare`, `/ladder`, `/autotune`, and applying an auto-tune winner in Generate."""

from __future__ import annotations

import json
from collections.abc import Callable

import gradio as gr
import pandas as pd

from studio import report
from studio.engine import Studio
from studio.errors import Cancelled
from studio.request import (
    PRECISIONS,
    GenerationRequest,
    build_request,
    parse_opts,
    validate_autotune,
    validate_counts,
)
from studio.sweeps import ladder as ladder_mod
from studio.sweeps.autotune import run_autotune
from studio.sweeps.autotune_search_space import floor_of
from studio.sweeps.compare import run_compare
from studio.ui import views
from studio.ui.cancel import Cancellations
from studio.ui.handlers.common import (
    cancelled_note,
    engine_errors,
    model_name,
    stop_check,
    ticked_by_group,
)


def _baseline_request(
    model, custom_model, device, prompt, seed, steps, guidance, width, height, scheduler
) -> GenerationRequest:
    """A sweep's baseline: fp32, no technique, no negative prompt."""
    return build_request(
        model_name(model, custom_model),
        device,
        "fp32",
        [],
        prompt,
        "",
        seed,
        steps,
        guidance,
        width,
        height,
        scheduler,
    )


def build_sweep_handlers(studio: Studio, cancels: Cancellations) -> dict[str, Callable]:
    """The sweeps' event functions, closed over one Studio and the sessions' cancel flags."""

    @engine_errors
    def compare(
        model,
        custom_model,
        device,
        prompt,
        seed,
        steps,
        guidance,
        width,
        height,
        scheduler,
        presets,
        custom_configs,
        warmup,
        rounds,
        request: gr.Request,
        progress=gr.Progress(),
    ):
        req = _baseline_request(
            model, custom_model, device, prompt, seed, steps, guidance, width, height, scheduler
        )
        configs = list(presets or []) + [c.strip() for c in (custom_configs or "").splitlines() if c.strip()]
        counts = validate_counts(warmup, rounds)
        try:
            result = run_compare(
                studio,
                req,
                configs,
                warmup=counts.warmup,
                rounds=counts.rounds,
                progress=lambda i, n, label: progress((i, n), desc=label),
                should_stop=stop_check(cancels, request),
            )
        except Cancelled as exc:
            return views.compare_cancelled(cancelled_note(exc))
        return views.compare_outputs(result)

    @engine_errors
    def run_ladder(
        model,
        custom_model,
        device,
        prompt,
        seed,
        steps,
        width,
        height,
        warmup,
        rounds,
        request: gr.Request,
        progress=gr.Progress(),
    ):
        req = _baseline_request(model, custom_model, device, prompt, seed, steps, None, width, height, None)
        counts = validate_counts(warmup, rounds)
        try:
            _, records = ladder_mod.run_ladder(
                studio,
                req,
                warmup=counts.warmup,
                rounds=counts.rounds,
                progress=lambda i, n, s: progress((i, n), desc=s),
                should_stop=stop_check(cancels, request),
            )
        except Cancelled as exc:
            return gr.update(visible=True), cancelled_note(exc), None, None
        table = pd.DataFrame(report.readable_rows(records, ladder_mod.STEP_COLUMN))
        return gr.update(visible=True), views.headline(records), table, records

    @engine_errors
    def autotune(
        model,
        custom_model,
        device,
        prompt,
        seed,
        steps,
        width,
        height,
        techniques,
        include_compile,
        min_psnr,
        min_ssim,
        fidelity_drop,
        warmup,
        rounds,
        confirm_rounds,
        request: gr.Request,
        progress=gr.Progress(),
    ):
        req = _baseline_request(model, custom_model, device, prompt, seed, steps, None, width, height, None)
        checked = validate_autotune(min_psnr, min_ssim, fidelity_drop, warmup, rounds, confirm_rounds)
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
                should_stop=stop_check(cancels, request),
                progress=lambda i, n, s: progress((i, n), desc=s),
            )
        except Cancelled as exc:
            return views.autotune_cancelled(cancelled_note(exc))
        return views.autotune_outputs(result)

    def apply_winner(winner):
        """The whole winner in Generate: precision, techniques by group and their settings; Generate shown."""
        winner = winner or {}
        opts = winner.get("techniques", [])
        precision = next((o for o in opts if o in PRECISIONS), "fp32")
        settings = json.dumps(winner.get("settings") or {}) if winner.get("settings") else ""
        return [precision, *ticked_by_group(opts), settings, gr.update(selected="generate")]

    return {
        "compare": compare,
        "ladder": run_ladder,
        "autotune": autotune,
        "apply_winner": apply_winner,
    }
