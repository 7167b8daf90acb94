"""Profile's handler: `/profile`, where the time of one denoising step goes (logged as a run)."""

from __future__ import annotations

from collections.abc import Callable

import gradio as gr
import pandas as pd

from studio.engine import Studio
from studio.report import profile_text
from studio.request import build_request
from studio.request.profile import validate_profile
from studio.ui.handlers.common import engine_errors, model_name


def profile_outputs(data: dict) -> tuple:
    """The tab's outputs from a profile's record: summary, bar chart, top operators, time by kind, the
    record itself, and the results shown."""
    return (
        profile_text.summary(data),
        pd.DataFrame(profile_text.chart_rows(data)),
        pd.DataFrame(profile_text.op_rows(data)),
        pd.DataFrame(profile_text.kind_rows(data)),
        data,
        gr.update(visible=True),
    )


def build_profile_handlers(studio: Studio) -> dict[str, Callable]:
    """Profile's event function, closed over one Studio."""

    @engine_errors
    def profile(
        model,
        custom_model,
        device,
        precision,
        optimizations,
        prompt,
        seed,
        steps,
        guidance,
        width,
        height,
        batch=1,
        settings="",
        progress=gr.Progress(),
    ):
        req = build_request(
            model_name(model, custom_model),
            device,
            precision,
            optimizations,
            prompt,
            "",
            seed,
            steps,
            guidance,
            width,
            height,
            None,
            settings,
            batch,
        )
        validate_profile(req)
        progress(0, desc="loading / configuring, then profiling step 2")
        run = studio.profile(req)
        for warning in run.warnings:
            gr.Warning(warning)
        return profile_outputs(run.as_json())

    return {"profile": profile}
