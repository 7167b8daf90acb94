"""The Combinations tab: what combines with what (`/matrix`). Every pair of the chosen techniques on one
model and device, as a matrix whose cells are refused (the registry's reason), failed (the error) or measured
against one baseline in the same interleaved rounds; its progress and Cancel are a sweep's
(`studio.ui.progress_views`)."""

from __future__ import annotations

import gradio as gr

from studio.ui.handlers.combinations import matrix_choices
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
    "image's PSNR against the baseline's. The time is estimated first, and a matrix over the limit is "
    "refused; techniques that compile, trace, convert or calibrate pay a long first call, so of every "
    "technique they are left out, with the reason, when the time does not allow them."
)


def matrix_tab(handlers: dict) -> None:
    gr.Markdown(INTRO)
    fields = model_inputs("mx")
    del fields["guidance"]  # the pairs run at the model's own guidance
    choices = matrix_choices(DEFAULT_MODEL, "")
    techniques = gr.CheckboxGroup(
        choices,
        value=[],
        label="Techniques to pair (none ticked: every speed and precision technique that can run here)",
        elem_id="mx-techniques",
    )
    with gr.Row():
        include = gr.Radio(
            ["auto", "yes", "no"],
            value="auto",
            label="Techniques with a long first call (compile, trace, convert, calibrate)",
            info="auto: those ticked, or of every technique those the time allows",
            elem_id="mx-include",
            scale=2,
        )
        max_cells = RawNumber(
            None, label="Measure at most this many cells (0: all)", precision=0, minimum=0, elem_id="mx-max"
        )
        warmup, rounds = sweep_counts("mx", 3)
    with gr.Row():
        go = gr.Button("Run the matrix", variant="primary", elem_id="matrix-btn", scale=3)
        stop = gr.Button("Cancel", elem_id="mx-cancel-btn", scale=1)
    status = status_area("mx-status")
    with gr.Column(visible=False, elem_id="mx-results") as results:
        summary = gr.Markdown(label="Summary", show_label=False, elem_id="mx-summary")
        table = gr.Dataframe(
            label="What combines with what", wrap=True, interactive=False, elem_id="mx-table"
        )
        why = gr.Markdown(label="Why", show_label=False, elem_id="mx-reasons")
        with gr.Accordion("The matrix as the API returns it", open=False):
            data = gr.JSON(label="Matrix")
    inputs = {**fields, "techniques": techniques, "include_compile": include, "max_cells": max_cells}
    wire_job(
        (go, stop, status),
        handlers["matrix"],
        reserve=handlers["matrix_reserve"],
        cancel=handlers["matrix_cancel"],
        stopping=SWEEP_STOPPING,
        inputs_kwargs={**inputs, "warmup": warmup, "rounds": rounds},
        outputs=[results, summary, table, why, data],
        api_name="matrix",
    )
    model, custom = fields["model"], fields["custom_model"]
    for event in (model.change, custom.blur):
        event(handlers["matrix_boxes"], [model, custom, techniques], techniques, api_visibility="private")
