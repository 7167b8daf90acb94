"""Profile's handler: `/profile`, where the time of one denoising step goes (logged as a run). It takes the
request's fields by name (`**fields`, read by `form_request`), passed by the tab with `inputs_kwargs`."""

from __future__ import annotations

from collections.abc import Callable

import gradio as gr
import pandas as pd

from studio.engine import Studio
from studio.report import profile_text
from studio.request.profile import validate_profile
from studio.ui.handlers.common import engine_errors, form_request, optional_fields


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

    @optional_fields
    @engine_errors
    def profile(progress=gr.Progress(), **fields):
        """Where the time of one denoising step goes, by kind of operator and by operator, with its FLOPs and
        how close it comes to the device's matmul peak. The run is logged."""
        req = form_request(fields)
        validate_profile(req)
        progress(0, desc="loading / configuring, then profiling step 2")
        run = studio.profile(req)
        for warning in run.warnings:
            gr.Warning(warning)
        return profile_outputs(run.as_json())

    return {"profile": profile}
