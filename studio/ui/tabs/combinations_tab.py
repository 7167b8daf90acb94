"""The Combinations tab: what combines with what (`/combinations`). Every pair of the chosen techniques on one
model and device, as a table whose cells are refused (the registry's reason), failed (the error) or measured
against one baseline in the same interleaved rounds; its progress and Cancel are a sweep's
(`studio.ui.progress_views`)."""

from __future__ import annotations

import gradio as gr

from studio.ui import views
from studio.ui.handlers.combinations_handlers import combinations_choices
from studio.ui.handlers.common import DEFAULT_MODEL
from studio.ui.handlers.sweeps import STOPPING as SWEEP_STOPPING
from studio.ui.progress_views import status_area, wire_job
from studio.ui.raw_fields import RawNumber
from studio.ui.widgets import model_inputs, sweep_counts

INTRO = (
    "Does this quantization work with torch.compile, and with that cache? Every pair of the techniques "
    "ticked (none ticked: every speed and precision technique that can run here), and each technique alone "
    "on the diagonal. A pair the registry refuses says why before anything runs; the others are timed in "
    "interleaved rounds against one baseline: a cell is the pair's speedup (≈: within noise) and its "
    "image's PSNR against the baseline's. The time is estimated first, and a run over the limit is "
    "refused; techniques that compile, trace, convert or calibrate pay a long first call, so of every "
    "technique they are left out, with the reason, when the time does not allow them."
)


def combinations_tab(handlers: dict) -> None:
    gr.Markdown(INTRO)
    fields = model_inputs("combinations")
    del fields["guidance"]  # the pairs run at the model's own guidance
    choices = combinations_choices(DEFAULT_MODEL, "")
    techniques = gr.CheckboxGroup(
        choices,
        value=[],
        label="Techniques to pair (none ticked: every speed and precision technique that can run here)",
        elem_id="combinations-techniques",
    )
    with gr.Row():
        include = gr.Radio(
            ["auto", "yes", "no"],
            value="auto",
            label="Techniques with a long first call (compile, trace, convert, calibrate)",
            info="auto: those ticked, or of every technique those the time allows",
            elem_id="combinations-include",
            scale=2,
        )
        max_cells = RawNumber(
            None,
            label="Measure at most this many cells (0: all)",
            precision=0,
            minimum=0,
            elem_id="combinations-max",
        )
        warmup, rounds = sweep_counts("combinations", 3)
    with gr.Row():
        go = gr.Button("Measure the combinations", variant="primary", elem_id="combinations-btn", scale=3)
        stop = gr.Button("Cancel", elem_id="combinations-cancel-btn", scale=1)
    status = status_area("combinations-status")
    with gr.Column(visible=False, elem_id="combinations-results") as results:
        summary = gr.Markdown(label="Summary", show_label=False, elem_id="combinations-summary")
        table = gr.Dataframe(
            label="What combines with what", wrap=True, interactive=False, elem_id="combinations-table"
        )
        why = gr.Markdown(label="Why", show_label=False, elem_id="combinations-reasons")
        with gr.Accordion("The combinations as the API returns them", open=False):
            data = gr.JSON(label="Combinations")
    # What /combinations fills, by name, in the order of its outputs (a client gets all but `results`).
    outputs = {"results": results, "summary": summary, "table": table, "reasons": why, "combinations": data}
    inputs = {**fields, "techniques": techniques, "include_compile": include, "max_cells": max_cells}
    wire_job(
        (go, stop, status),
        **views.filling(handlers["combinations"], outputs),
        reserve=handlers["combinations_reserve"],
        cancel=handlers["combinations_cancel"],
        stopping=SWEEP_STOPPING,
        inputs_kwargs={**inputs, "warmup": warmup, "rounds": rounds},
        api_name="combinations",
    )
    model, custom = fields["model"], fields["custom_model"]
    for event in (model.change, custom.blur):
        event(
            handlers["combinations_boxes"], [model, custom, techniques], techniques, api_visibility="private"
        )
