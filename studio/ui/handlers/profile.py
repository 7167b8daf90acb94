"""Profile's handlers: `/profile`, where the time of one denoising step goes (logged as a run), and its tab's
Cancel. It takes the request's fields by name (`**fields`, read by `form_request`), passed by the tab with
`inputs_kwargs`, and returns what it fills by name (the tab names its components the same,
`studio.ui.views.filling`).

A profile is one short call (three steps) that the engine cannot stop part-way: with the sessions' cancel
flags (`cancels`), a Cancel stops a Profile that waits in the queue before it starts, and a running one ends
after its third step."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import nullcontext
from typing import Any

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


def profile_outputs(data: dict) -> dict[str, Any]:
    """The tab's outputs by name from a profile's record: summary, bar chart, top operators, time by kind,
    the record itself, and the results shown."""
    return {
        "summary": profile_text.summary(data),
        "chart": pd.DataFrame(profile_text.chart_rows(data)),
        "ops": pd.DataFrame(profile_text.op_rows(data)),
        "kinds": pd.DataFrame(profile_text.kind_rows(data)),
        "record": data,
        "results": gr.update(visible=True),
    }


def profile_cancelled(why: str) -> dict[str, Any]:
    """The tab's outputs by name for a Profile cancelled before it started: a sentence, nothing else."""
    note = f"**Profile cancelled before it started** ({why}): nothing was profiled or logged."
    empty = dict.fromkeys(("chart", "ops", "kinds", "record"))
    return {"summary": note, **empty, "results": gr.update(visible=True)}


class ProfileHandlers:
    """Profile's event function over one Studio and, when given, the sessions' cancel flags."""

    def __init__(self, studio: Studio, cancels: Cancellations | None = None) -> None:
        self.studio = studio
        self.cancels = cancels

    @optional_fields
    @engine_errors
    def profile(self, request: gr.Request = None, progress=gr.Progress(), **fields) -> dict[str, Any]:
        """Where the time of one denoising step goes, by kind of operator and by operator, with its FLOPs and
        how close it comes to the device's matmul peak. The run is logged."""
        cancels = self.cancels
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
            run = self.studio.profile(req)
        for warning in run.warnings:
            gr.Warning(warning)
        return profile_outputs(run.as_json())


def reserve_nothing(request: gr.Request) -> None:
    """Without cancel flags the click reserves nothing."""


def cannot_stop(request: gr.Request) -> str:
    """Without cancel flags the Cancel says why it cannot stop."""
    return CANNOT_STOP


def build_profile_handlers(studio: Studio, cancels: Cancellations | None = None) -> dict[str, Callable]:
    """Profile's event functions by name; without cancel flags its Cancel says why it cannot stop."""
    profile = ProfileHandlers(studio, cancels).profile
    if cancels is None:
        return {"profile": profile, "profile_reserve": reserve_nothing, "profile_cancel": cannot_stop}
    return {"profile": profile, **cancel_controls(cancels, "profile", STOPPING)}
