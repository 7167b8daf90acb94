"""The Compare and Ladder tabs: configurations against the baseline in interleaved rounds (`/compare`), over
optional X and Y axes (steps, size, scheduler, batch, seed, prompt, lora or a technique setting), and the
diffusers documentation's speed ladder on this machine (`/ladder`). Each shows where it is while it runs and
has a Cancel of its own (`studio.ui.progress_views`)."""

from __future__ import annotations

import gradio as gr

from pipelines.schedulers import menu_choices
from studio.request.axes import AXES
from studio.ui import views
from studio.ui.handlers.common import DEFAULT_MODEL, family_of
from studio.ui.handlers.sweeps import STOPPING as SWEEP_STOPPING
from studio.ui.presets import conflicts_shown, preselected, presets_for, presets_for_model
from studio.ui.progress_views import status_area, wire_job
from studio.ui.raw_fields import RawNumber
from studio.ui.widgets import model_inputs, sweep_counts

AXIS_CHOICES = ("none", *AXES, "deepcache.interval", "cfg_cutoff.after", "token_merging.ratio")


def axis_fields(which: str, what: str, example: str) -> tuple[gr.Dropdown, gr.Textbox]:
    """An axis of Compare (`which`: X or Y) and its values: elem ids cmp-axis / cmp-values for X, cmp-y-axis /
    cmp-y-values for Y."""
    tag = "" if which == "X" else f"{which.lower()}-"
    axis = gr.Dropdown(
        list(AXIS_CHOICES),
        value="none",
        label=f"{which} axis (optional): {what}",
        allow_custom_value=True,
        elem_id=f"cmp-{tag}axis",
    )
    values = gr.Textbox("", label=f"{which} values", placeholder=example, elem_id=f"cmp-{tag}values")
    return axis, values


def compare_tab(handlers: dict) -> None:
    gr.Markdown(
        "The baseline and each configuration are timed in interleaved rounds (A B C, A B C, …), so a "
        "slower or faster minute of the machine hits them all alike. A speedup is the median of the "
        "per-round ratios, shown with its range (from 5 rounds up, the most extreme round on each side left "
        "out); a range that crosses ×1.00 reads *within noise*."
    )
    fields = model_inputs("cmp")
    with gr.Row():
        scheduler = gr.Dropdown(menu_choices(), value="default", label="Scheduler", allow_custom_value=True)
        warmup, rounds = sweep_counts("cmp", 5)
    presets = presets_for(family_of(DEFAULT_MODEL, ""))
    configs = gr.CheckboxGroup(
        presets,
        value=preselected(presets),
        label="Configurations, each against the baseline (ticked: those likely to pay on this device)",
        elem_id="cmp-configs",
    )
    conflicts = gr.Markdown("", visible=False, elem_id="cmp-conflicts")
    custom_configs = gr.Textbox(
        "",
        label="More configurations, one per line",
        placeholder="bf16,channels_last,sdpa\nopenvino[mode=hybrid_int8]",
        lines=2,
        elem_id="cmp-custom",
    )
    with gr.Row():
        batch = RawNumber(1, label="Batch (images per prompt)", precision=0, minimum=1, elem_id="cmp-batch")
        examples = "1,2,4,8 · batch: auto · seed: +4 · prompt: circle,square"
        axis, values = axis_fields("X", "a second axis for every configuration", examples)
        y_axis, y_values = axis_fields(
            "Y", "with X, a grid per configuration", "prompt: circle,square (search, then replace)"
        )
    with gr.Row():
        go = gr.Button("Compare", variant="primary", elem_id="compare-btn", scale=3)
        stop = gr.Button("Cancel", elem_id="cmp-cancel-btn", scale=1)
    status = status_area("cmp-status")
    with gr.Column(visible=False, elem_id="cmp-results") as results:
        headline = gr.Markdown(label="Headline", show_label=False, elem_id="cmp-headline")
        gallery = gr.Gallery(
            label="Side by side",
            columns=4,
            height="auto",
            object_fit="contain",
            format="png",
            elem_id="cmp-gallery",
            allow_preview=True,
        )
        table = gr.Dataframe(label="Results", elem_id="cmp-table", wrap=True, interactive=False)
        with gr.Accordion("Details: first call, quality, host", open=False):
            details = gr.Dataframe(
                label="Details", show_label=False, wrap=True, interactive=False, elem_id="cmp-details"
            )
        lat = gr.BarPlot(
            x="configuration",
            y="latency (s)",
            title="Latency per call (median)",
            label="Latency chart",
            show_label=False,
            y_lim=[0, None],  # from zero: bar lengths compare as the latencies do
            height=220,
            x_label_angle=0,
            elem_id="cmp-latency",
        )
        with gr.Row(equal_height=False):
            choice = gr.Dropdown([], label="Slider: baseline vs", scale=1)
            slider = gr.ImageSlider(
                label="Baseline | configuration", format="png", type="pil", elem_id="cmp-slider", scale=2
            )
        with gr.Column(visible=False, elem_id="xy-results") as xy_box:
            grid = gr.Image(
                label="Grid: configurations (× Y) by X", type="pil", format="png", elem_id="xy-grid"
            )
            with gr.Row():
                speed_heat = gr.Dataframe(
                    label="Speedup vs the baseline at the same X (and Y)",
                    interactive=False,
                    elem_id="xy-speedup",
                )
                psnr_heat = gr.Dataframe(
                    label="Image difference vs the baseline at the same X (and Y)",
                    interactive=False,
                    elem_id="xy-psnr",
                )
            with gr.Row():
                throughput = gr.LinePlot(
                    x="batch",
                    y="images/s",
                    color="configuration",
                    title="Throughput",
                    label="Throughput chart",
                    show_label=False,
                    height=220,
                    visible=False,
                )
                peak = gr.LinePlot(
                    x="batch",
                    y="peak memory (MB)",
                    color="configuration",
                    title="Peak memory",
                    label="Peak memory chart",
                    show_label=False,
                    height=220,
                    visible=False,
                )
        with gr.Row():
            csv_file = gr.File(label="CSV")
            md_file = gr.File(label="Markdown table")
        with gr.Accordion("Rows as the API returns them", open=False):
            rows = gr.JSON(label="Rows")
    images = gr.State({})
    inputs = {**fields, "scheduler": scheduler, "presets": configs, "custom_configs": custom_configs}
    inputs.update(warmup=warmup, rounds=rounds, batch=batch, axis=axis, axis_values=values)
    inputs.update(y_axis=y_axis, y_values=y_values)
    # What /compare fills, by the names its views give (`views.compare_outputs`, `xy_views.xy_outputs`), in
    # the order of the endpoint's outputs (a client's tuple, less the two columns and the `pairs` State).
    outputs = {"results": results, "headline": headline, "gallery": gallery, "table": table}
    outputs.update(details=details, latency_chart=lat, slider_choice=choice, slider=slider, pairs=images)
    outputs.update(csv=csv_file, markdown=md_file, xy_results=xy_box, grid=grid, speedup_map=speed_heat)
    outputs.update(psnr_map=psnr_heat, throughput=throughput, peak_memory=peak, rows=rows)
    wire_job(
        (go, stop, status),
        **views.filling(handlers["compare"], outputs),
        reserve=handlers["compare_reserve"],
        cancel=handlers["compare_cancel"],
        stopping=SWEEP_STOPPING,
        inputs_kwargs=inputs,
        api_name="compare",
    )
    model, custom = fields["model"], fields["custom_model"]
    model.change(presets_for_model, [model, custom, configs], configs, api_visibility="private")
    custom.blur(presets_for_model, [model, custom, configs], configs, api_visibility="private")
    for changed in (configs.change, custom_configs.change):  # said as soon as the second box is ticked
        changed(conflicts_shown, [configs, custom_configs], conflicts, queue=False, api_visibility="private")
    choice.change(
        lambda c, pairs: pairs.get(c),
        [choice, images],
        slider,
        api_visibility="private",
    )


def ladder_tab(handlers: dict) -> None:
    gr.Markdown(
        "The diffusers documentation's speed ladder on this machine: each step adds one technique to the "
        "previous ones, all steps timed in interleaved rounds. Steps that cannot run here are shown as "
        "skipped, with the reason."
    )
    fields = model_inputs("lad")
    del fields["guidance"]  # the ladder runs at the model's own guidance
    with gr.Row():
        warmup, rounds = sweep_counts("lad", 5)
        batch = RawNumber(1, label="Batch (images per prompt)", precision=0, minimum=1, elem_id="lad-batch")
    with gr.Row():
        go = gr.Button("Run the ladder", variant="primary", elem_id="ladder-btn", scale=3)
        stop = gr.Button("Cancel", elem_id="ladder-cancel-btn", scale=1)
    status = status_area("ladder-status")
    with gr.Column(visible=False, elem_id="ladder-results") as results:
        md = gr.Markdown(label="Headline", show_label=False, elem_id="ladder-md")
        table = gr.Dataframe(label="Ladder", wrap=True, interactive=False, elem_id="ladder-table")
        with gr.Accordion("Rows as the API returns them", open=False):
            rows = gr.JSON(label="Rows")
    outputs = {"results": results, "headline": md, "table": table, "rows": rows}  # `views.ladder_outputs`
    wire_job(
        (go, stop, status),
        **views.filling(handlers["ladder"], outputs),
        reserve=handlers["ladder_reserve"],
        cancel=handlers["ladder_cancel"],
        stopping=SWEEP_STOPPING,
        inputs_kwargs={**fields, "warmup": warmup, "rounds": rounds, "batch": batch},
        api_name="ladder",
    )
