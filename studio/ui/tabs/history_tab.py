"""The History tab: the run log filtered (`/history`), as a plot and a CSV, the database to download
(`/export_db`), and a logged run loaded back into Generate (`/load_config`, or a click on a row)."""

from __future__ import annotations

from typing import Any

import gradio as gr

from studio.optimizations import REGISTRY
from studio.ui.raw_fields import RawNumber
from studio.ui.views import named

STATUSES = ("", "ok", "failed", "cancelled", "interrupted", "running")
READ_ME = (
    "Click a row to load that run's configuration into Generate. <small>Latency: the median of the run's "
    "timed calls. Speedup: in a sweep, the median of its per-round ratios against the sweep's baseline, "
    "lowest–highest in brackets.</small>"
)


def history_tab(handlers: dict, generate: dict[str, Any], tabs: gr.Tabs, tab: gr.Tab) -> None:
    """Build the tab, refreshed whenever `tab` is selected; a loaded run fills `generate["filled"]` and is
    named in `generate["loaded_run"]`."""
    with gr.Row():
        model = gr.Textbox("", label="Model")
        device = gr.Textbox("", label="Device")
        status = gr.Dropdown(list(STATUSES), value="", label="Status", allow_custom_value=True)
        technique = gr.Dropdown(["", *REGISTRY], value="", label="Technique", allow_custom_value=True)
        since = gr.Textbox("", label="Since (ISO date)", placeholder="2026-11-01")
        limit = RawNumber(200, label="Rows", precision=0, minimum=1, maximum=5000)
    refresh = gr.Button("Refresh", elem_id="history-btn")
    note = gr.Markdown("", elem_id="history-note")
    gr.Markdown(READ_ME)
    table = gr.Dataframe(label="Runs", wrap=True, max_height=360, interactive=False, elem_id="history-table")
    plot = gr.LinePlot(
        x="time",
        y="latency (s)",
        color="configuration",
        title="Latency per call over time",
        label="Latency over time",
        show_label=False,
        x_axis_format="%m-%d %H:%M",
        x_label_angle=0,
        height=260,
    )
    with gr.Row():
        csv_file = gr.File(label="CSV of these runs")
        db_btn = gr.DownloadButton("Download the database")
    filters = [model, device, status, technique, since, limit]
    shown = [table, plot, csv_file]
    # The form answers a bad filter with a sentence (`note`) and keeps its view; the API's /history raises it.
    form_view = named(handlers["history_form"], {"table": table, "plot": plot, "csv": csv_file, "note": note})
    refresh.click(form_view, filters, [*shown, note], api_visibility="private")
    tab.select(form_view, filters, [*shown, note], api_visibility="private")
    records = gr.JSON(visible=False, label="records")  # the API's: the runs in the shared vocabulary
    gr.Button(visible=False).click(handlers["history_api"], filters, [*shown, records], api_name="history")
    db_btn.click(handlers["export_db"], None, db_btn, api_name="export_db")
    run_id = RawNumber(visible=False, precision=0, label="run_id")
    form = {**generate["filled"], "tabs": tabs}
    gr.Button(visible=False).click(
        named(handlers["load_config"], form), run_id, list(form.values()), api_name="load_config"
    )
    picked = {**form, "loaded": generate["loaded_run"]}
    table.select(
        named(handlers["load_selected"], picked), table, list(picked.values()), api_visibility="private"
    )
