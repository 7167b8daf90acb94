"""The Shard tab: a model saved as sharded safetensors under the studio's home (`/shard`), ready to load in
Generate."""

from __future__ import annotations

import gradio as gr

from pipelines.registry import SPECS
from studio.ui.handlers.common import DEFAULT_MODEL
from studio.ui.views import filling
from studio.ui.widgets import generation_queue


def use_in_generate(report: dict | None):
    """The sharded folder just written, in Generate's model field, and Generate shown."""
    if not report or not report.get("out"):
        return gr.update(), gr.update()
    return report["out"], gr.Tabs(selected="generate")


def shard_tab(handlers: dict, generate: dict, tabs: gr.Tabs) -> None:
    """Build the tab; **Use in Generate** puts the folder just written in `generate["custom"]`."""
    gr.Markdown(
        "Save a model's components as sharded safetensors, as diffusers' *Working with big models* guide "
        "describes. The folder is created under the studio's home, in `sharded/<name>`, where the studio "
        "loads it from: **Use in Generate** puts it in Generate's model field."
    )
    with gr.Row():
        model = gr.Dropdown(list(SPECS), value=DEFAULT_MODEL, label="Model", allow_custom_value=True)
        custom = gr.Textbox("", label="…or a hub id / local directory")
        name = gr.Textbox("tiny-shapes-sharded", label="Folder name", elem_id="shard-name")
        size = gr.Textbox("1MB", label="Max shard size", placeholder="500KB, 1MB, 5GB", elem_id="shard-size")
    go = gr.Button("Save sharded", variant="primary", elem_id="shard-btn")
    note = gr.Markdown(elem_id="shard-note")  # a refused save, in place of its shards
    table = gr.Dataframe(label="Shards", wrap=True, elem_id="shard-table")
    report = gr.JSON(label="Report (as the API returns it)")
    use = gr.Button("Use in Generate", elem_id="shard-use-btn")
    inputs = [model, custom, name, size]
    shown = {"report": report, "table": table, "note": note}
    go.click(
        **filling(handlers["shard_form"], shown),
        inputs=inputs,
        api_visibility="private",
        **generation_queue(),
    )
    gr.Button(visible=False).click(  # the API's: a refusal is an error for a client
        handlers["shard"], inputs, [report, table], api_name="shard", **generation_queue()
    )
    use.click(use_in_generate, report, [generate["custom"], tabs], queue=False, api_visibility="private")
