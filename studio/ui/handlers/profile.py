"""Profile's handlers: `/profile`, where the time of one denoising step goes (logged as a run), and its tab's
Cancel. It takes the request's fields by name (`**fields`, read by `form_request`), passed by the tab with
`inputs_kwargs`.

A profile is one short call (three steps) that the engine cannot stop part-way: with the sessions' cancel
flags (`cancels`), a Cancel stops a Profile that waits in the queue before it starts, and a running one ends
after its third step."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import nullcontext

import gradio as gr
import pandas as pd

from studio.engine import Studio
from studio.report import profile_text
from studio.ui.cancel import Cancellations
from studio.ui.handlers.common import (
    cancel_controls,
    cancellable_run,
    engine_errors,
    form_request,
    optional_fields,
)

CANNOT_STOP = "A Profile runs three steps and cannot stop part-way: it ends on its own in a moment."
STOPPING = "A Profile waiting in the queue will not start; one already profiling ends after its third step."


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


def profile_cancelled(why: str) -> tuple:
    """The tab's outputs for a Profile cancelled before it started: a sentence, nothing else."""
    note = f"**Profile cancelled before it started** ({why}): nothing was profiled or logged."
    return note, None, None, None, None, gr.update(visible=True)


def build_profile_handlers(studio: Studio, cancels: Cancellations | None = None) -> dict[str, Callable]:
    """Profile's event functions, closed over one Studio and, when given, the sessions' cancel flags."""

    @optional_fields
    @engine_errors
    def profile(request: gr.Request = None, progress=gr.Progress(), **fields):
        """Where the time of one denoising step goes, by kind of operator and by operator, with its FLOPs and
        how close it comes to the device's matmul peak. The run is logged."""
        run_of = cancellable_run(cancels, request, "profile") if cancels is not None else nullcontext()
        with run_of as should_stop:
            req = form_request(fields)
            why = should_stop() if should_stop is not None else None
            if why:
                return profile_cancelled(why if isinstance(why, str) else "stopped")
            progress(
                None,  # the engine reports no steps of a profile: no share done to show
                desc=f"Profile: preparing the pipeline, then step 1 of {req.steps} (warm-up), step 2 "
                "(profiled) and step 3 (timed without the profiler)",
            )
            run = studio.profile(req)
        for warning in run.warnings:
            gr.Warning(warning)
        return profile_outputs(run.as_json())

    if cancels is not None:
        return {"profile": profile, **cancel_controls(cancels, "profile", STOPPING)}

    def reserve(request: gr.Request) -> None:
        """Without cancel flags the click reserves nothing."""

    def cancel(request: gr.Request) -> str:
        """Without cancel flags the Cancel says why it cannot stop."""
        return CANNOT_STOP

    return {"profile": profile, "profile_reserve": reserve, "profile_cancel": cancel}
