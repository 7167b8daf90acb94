"""The Profile tab: where the time of one denoising step goes, by kind of operator and by operator, its
FLOPs and how close it comes to the device's matmul peak (`/profile`), with its progress and Cancel
(`studio.ui.progress_views`)."""

from __future__ import annotations

import gradio as gr

from studio.optimizations import availability
from studio.request import PRECISIONS
from studio.ui import views
from studio.ui.handlers.common import GROUPS, in_form_order, techniques_by_group
from studio.ui.handlers.profile import STOPPING as PROFILE_STOPPING
from studio.ui.progress_views import status_area, wire_job
from studio.ui.raw_fields import RawNumber
from studio.ui.widgets import model_inputs, settings_placeholder


def profile_tab(handlers: dict) -> None:
    gr.Markdown(
        "One denoising step of the request under `torch.profiler`, on the pipeline a Generate would use (the "
        "techniques applied the same way): step 1 warms up, step 2 is profiled, step 3 is timed without the "
        "profiler. Time is each operator's own (self) time: CPU time on a CPU, kernel time on a GPU; time "
        "outside any operator is Python and dispatch overhead, or an idle GPU. The run is logged in History."
    )
    fields = model_inputs("prof")
    usable = {t["name"] for t in availability() if t["unavailable"] is None}
    groups = techniques_by_group("auto")
    names = [t["name"] for g in GROUPS for t in groups[g] if t["unavailable"] is None]
    with gr.Row():
        precision = gr.Radio(
            [p for p in PRECISIONS if p == "fp32" or p in usable],
            value="fp32",
            label="Weights precision",
            elem_id="prof-precision",
        )
        techniques = gr.Dropdown(
            names, value=[], multiselect=True, label="Techniques", scale=2, elem_id="prof-techniques"
        )
        batch = RawNumber(1, label="Batch (images per prompt)", precision=0, minimum=1, elem_id="prof-batch")
    settings = gr.Textbox(
        "", label="Technique settings (JSON)", elem_id="prof-settings", placeholder=settings_placeholder()
    )
    with gr.Row():
        go = gr.Button("Profile", variant="primary", elem_id="profile-btn", scale=3)
        stop = gr.Button("Cancel", elem_id="profile-cancel-btn", scale=1)
    status = status_area("prof-status")
    with gr.Column(visible=False, elem_id="prof-results") as results:
        summary = gr.Markdown(label="Summary", show_label=False, elem_id="prof-summary")
        chart = gr.BarPlot(
            x="time (ms)",
            y="kind",
            title="Time of the profiled step by kind of operator",
            label="Time by kind chart",
            show_label=False,
            x_lim=[0, None],
            tooltip=["kind", "time (ms)"],
            height=260,
            elem_id="prof-chart",
        )
        ops = gr.Dataframe(label="Top operators", wrap=True, interactive=False, elem_id="prof-ops")
        with gr.Accordion("Time and FLOPs by kind", open=False):
            kinds = gr.Dataframe(
                label="Time and FLOPs by kind",
                show_label=False,
                wrap=True,
                interactive=False,
                elem_id="prof-kinds",
            )
        with gr.Accordion("Profile as the API returns it", open=False):
            record = gr.JSON(label="Profile")
    inputs = in_form_order({**fields, "precision": precision, "optimizations": techniques})
    # What /profile fills, by name, in the order of its outputs (a client gets all but `results`, the layout).
    outputs = {"summary": summary, "chart": chart, "ops": ops, "kinds": kinds, "record": record}
    outputs.update(results=results)
    wire_job(
        (go, stop, status),
        **views.filling(handlers["profile"], outputs),
        reserve=handlers["profile_reserve"],
        cancel=handlers["profile_cancel"],
        stopping=PROFILE_STOPPING,
        inputs_kwargs={**inputs, "batch": batch, "settings": settings},
        api_name="profile",
    )
