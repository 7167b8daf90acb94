"""The sweeps' handlers: `/compare` (with an optional X axis), `/ladder`, `/autotune`, applying an
auto-tune winner in Generate, and the Cancel of these tabs.

Each sweep reports where it is through `gr.Progress` ("Compare: configuration 2 of 3 (channels_last), round 1
of 3, step 7 of 20"); a cancelled one shows what it measured until then (`studio.ui.progress_views`).

Each sweep is a method of its tab's class (`Compare.compare`, `Ladder.ladder`, `Autotune.autotune`), over
one Studio and the sessions' cancel flags. It names its own settings and takes the request's fields by name
(`**fields`, read by `form_request`: a sweep's baseline is fp32 with no technique); the tabs pass their
components with `inputs_kwargs`, so the API's parameters carry those names. Each returns what it fills by
name, as the views build it (`studio.ui.views`, `xy_views`, `progress_views`): the tabs name their components
the same (`studio.ui.views.named`)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gradio as gr

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
MEASURED_AT = ("steps", "width", "height", "batch")  # what an auto-tune winner was measured at, by name


def measured_at(winner: dict[str, Any] | None, request: GenerationRequest) -> dict[str, Any] | None:
    """An auto-tune winner with the steps, size and batch it was measured at (Generate runs the same)."""
    if winner is None:
        return None
    return {**winner, **{name: getattr(request, name) for name in MEASURED_AT}}


def configurations(presets: list[str] | None, custom_configs: str | None) -> list[str]:
    """Compare's configurations: the ticked presets, then those typed one per line."""
    return list(presets or []) + [c.strip() for c in (custom_configs or "").splitlines() if c.strip()]


@dataclass(frozen=True)
class Compare:
    """The Compare tab's run, on one Studio, stopped by the tab's Cancel (`cancels`)."""

    studio: Studio
    cancels: Cancellations

    @optional_fields
    @engine_errors
    def compare(
        self,
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
        with cancellable_run(self.cancels, request, "compare") as should_stop:
            req = form_request(fields)
            configs = configurations(presets, custom_configs)
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
                        return xy_views.xy_outputs(run_xy(self.studio, req, configs, x_axis, y, **options))
                    return views.compare_outputs(run_compare(self.studio, req, configs, **options))
            except Cancelled as exc:
                return progress_views.compare_cancelled(exc)


@dataclass(frozen=True)
class Ladder:
    """The Ladder tab's run, on one Studio, stopped by the tab's Cancel (`cancels`)."""

    studio: Studio
    cancels: Cancellations

    @optional_fields
    @engine_errors
    def ladder(self, warmup, rounds, request: gr.Request = None, progress=gr.Progress(), **fields):
        """The diffusers documentation's speed ladder on this machine: each step adds one technique to the
        previous ones, all timed in interleaved rounds against the baseline."""
        with cancellable_run(self.cancels, request, "ladder") as should_stop:
            req = form_request(fields)
            counts = validate_counts(warmup, rounds)
            try:
                _, records = ladder_mod.run_ladder(
                    self.studio,
                    req,
                    warmup=counts.warmup,
                    rounds=counts.rounds,
                    progress=progress_views.progress_to(progress, "Ladder"),
                    should_stop=should_stop,
                )
            except Cancelled as exc:
                return progress_views.ladder_cancelled(exc)
        return views.ladder_outputs(records)


@dataclass(frozen=True)
class Autotune:
    """The Auto-tune tab's run, on one Studio, stopped by the tab's Cancel (`cancels`)."""

    studio: Studio
    cancels: Cancellations

    @optional_fields
    @engine_errors
    def autotune(
        self,
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
        with cancellable_run(self.cancels, request, "autotune") as should_stop:
            req = form_request(fields)
            settings = AutotuneSettings.of(locals())
            progress_to = progress_views.progress_to(progress, "Auto-tune")
            try:
                result = autotune_mod.run_with(
                    self.studio, req, settings, progress=progress_to, should_stop=should_stop
                )
            except Cancelled as exc:
                return progress_views.autotune_cancelled(exc)
            shown = views.autotune_outputs(result)
            return {**shown, "winner": measured_at(shown["winner"], req)}


def apply_winner(winner: dict[str, Any] | None) -> dict[str, Any]:
    """The whole auto-tune winner in Generate, by field name: precision, techniques by group and their
    settings, and the steps, size and batch it was measured at; Generate shown (`tabs`)."""
    winner = winner or {}
    optimizations = winner.get("techniques", [])
    keep = gr.update()
    return {
        "precision": next((o for o in optimizations if o in PRECISIONS), "fp32"),
        **dict(zip(TECHNIQUE_BOXES, ticked_by_group(optimizations), strict=True)),
        "settings": json.dumps(winner["settings"]) if winner.get("settings") else "",
        **{name: winner.get(name, keep) for name in MEASURED_AT},
        "tabs": gr.update(selected="generate"),
    }


def build_sweep_handlers(studio: Studio, cancels: Cancellations) -> dict[str, Callable]:
    """The sweeps' event functions by name, on one Studio and the sessions' cancel flags: each run, its
    Run button's reservation and its Cancel (`cancel_controls`), and applying an auto-tune winner."""
    controls = {job: cancel_controls(cancels, job, STOPPING) for job in ("compare", "ladder", "autotune")}
    return {
        "compare": Compare(studio, cancels).compare,
        "ladder": Ladder(studio, cancels).ladder,
        "autotune": Autotune(studio, cancels).autotune,
        "apply_winner": apply_winner,
        **{name: fn for job in controls.values() for name, fn in job.items()},
    }
