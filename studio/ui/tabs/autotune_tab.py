"""The Auto-tune tab: the fastest configuration within a quality floor (`/autotune`), its progress and Cancel
(`studio.ui.progress_views`), and a button that applies the winner in Generate."""

from __future__ import annotations

from typing import Any

import gradio as gr

from studio.optimizations import availability
from studio.request.sweep_limits import AutotuneSettings
from studio.ui import views
from studio.ui.handlers.common import TECHNIQUE_BOXES
from studio.ui.handlers.sweeps import MEASURED_AT
from studio.ui.handlers.sweeps import STOPPING as SWEEP_STOPPING
from studio.ui.progress_views import status_area, wire_job
from studio.ui.raw_fields import RawNumber
from studio.ui.views import MEMORY_TITLE
from studio.ui.widgets import model_inputs, sweep_counts

TUNED = AutotuneSettings()  # the form's values: the auto-tuner's defaults
FLOOR = TUNED.floor


def autotune_tab(handlers: dict, generate: dict[str, Any], tabs: gr.Tabs) -> None:
    """Build the tab; `generate` is what the Generate tab returned, for the winner to fill in."""
    gr.Markdown(
        "The fastest configuration whose image stays within a quality floor of the baseline's: each "
        "technique "
        "alone (techniques with settings over a small grid), then the survivors combined greedily, then the "
        "winner confirmed against the baseline in its own interleaved rounds. Only a winner the confirmation "
        "measured faster beyond noise is offered."
    )
    fields = model_inputs("tune")
    del fields["guidance"]  # the search runs at the model's own guidance
    names = [t["name"] for t in availability() if t["unavailable"] is None]
    with gr.Row():
        techniques = gr.Dropdown(
            names,
            value=[],
            multiselect=True,
            label="Techniques to search (empty: all that can help)",
            scale=3,
        )
        include_compile = gr.Checkbox(
            False, label="include torch.compile (minutes per configuration on a CPU)"
        )
    with gr.Row():
        min_psnr = RawNumber(FLOOR.min_psnr, label="Min PSNR vs baseline (dB)")
        min_ssim = RawNumber(FLOOR.min_ssim, label="Min SSIM")
        fidelity_drop = RawNumber(FLOOR.fidelity_drop, label="Max prompt-fidelity drop (tiny-shapes)")
        warmup, rounds = sweep_counts("tune", TUNED.rounds)
        confirm = RawNumber(
            TUNED.confirm_rounds, label="Confirmation rounds", precision=0, minimum=1, elem_id="tune-confirm"
        )
        batch = RawNumber(1, label="Batch (images per prompt)", precision=0, minimum=1, elem_id="tune-batch")
    with gr.Row():
        go = gr.Button("Auto-tune", variant="primary", elem_id="tune-btn", scale=2)
        stop = gr.Button("Cancel", elem_id="tune-cancel-btn", scale=1)
        apply = gr.Button("Apply the winner in Generate", interactive=False, elem_id="tune-apply", scale=2)
    status = status_area("tune-status")
    with gr.Column(visible=False, elem_id="tune-results") as results:
        md = gr.Markdown(label="Summary", show_label=False, elem_id="tune-md")
        table = gr.Dataframe(
            label="Every configuration measured", wrap=True, interactive=False, elem_id="tune-table"
        )
        # One plot a row: side by side, each legend (one entry per configuration) was cut off at 1280 px.
        quality = gr.ScatterPlot(
            x="latency_s",
            y="psnr_db",
            color="config",
            title="Latency (s) vs PSNR (dB, capped at 100)",
            x_title="latency (s)",
            y_title="PSNR (dB)",
            y_lim=[0, 105],  # an identical image reads 100 dB (the cap)
            label="Latency vs PSNR",
            show_label=False,
            tooltip=["config", "latency_s", "psnr_db"],
            height=260,
            elem_id="tune-quality",
        )
        memory = gr.ScatterPlot(
            x="latency_s",
            y="peak_memory_mb",
            color="config",
            title=MEMORY_TITLE,
            x_title="latency (s)",
            y_title="peak memory (MB)",
            label="Latency vs peak memory",
            show_label=False,
            tooltip=["config", "latency_s", "peak_memory_mb"],
            y_lim=[
                0,
                None,
            ],  # from zero (and above the highest point, `memory_plot`): a few MB do not fill it
            height=260,
            elem_id="tune-memory",
        )
        with gr.Accordion("Result as the API returns it", open=False):
            data = gr.JSON(label="Result")
    winner = gr.State(None)
    inputs = {**fields, "techniques": techniques, "include_compile": include_compile, "min_psnr": min_psnr}
    inputs.update(min_ssim=min_ssim, fidelity_drop=fidelity_drop, warmup=warmup, rounds=rounds)
    inputs.update(confirm_rounds=confirm, batch=batch)
    # What /autotune fills, by the names its views give (`views.autotune_outputs`), in the endpoint's order.
    outputs = {"results": results, "summary": md, "table": table, "quality_plot": quality}
    outputs.update(memory_plot=memory, result=data, winner=winner, apply=apply)
    wire_job(
        (go, stop, status),
        **views.filling(handlers["autotune"], outputs),
        reserve=handlers["autotune_reserve"],
        cancel=handlers["autotune_cancel"],
        stopping=SWEEP_STOPPING,
        inputs_kwargs=inputs,
        api_name="autotune",
    )
    # What a winner fills (`apply_winner`), by name: Generate's precision, technique boxes, settings and the
    # fields it was measured at (by element id: "gen-steps"), and the tabs.
    by_id = {c.elem_id: c for c in generate["targets"] if c.elem_id}
    targets = {"precision": generate["precision"]}
    targets.update(zip(TECHNIQUE_BOXES, generate["boxes"], strict=True))
    targets.update({"settings": generate["settings"], **{n: by_id[f"gen-{n}"] for n in MEASURED_AT}})
    targets["tabs"] = tabs
    apply.click(
        **views.filling(handlers["apply_winner"], targets),
        inputs=winner,
        queue=False,
        api_visibility="private",
    )
