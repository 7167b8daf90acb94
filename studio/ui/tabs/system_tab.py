"""The System tab: what this machine can run (`/system`)."""

from __future__ import annotations

import gradio as gr


def system_tab(handlers: dict, tab: gr.Tab) -> None:
    """Build the tab, refreshed whenever `tab` is selected."""
    md = gr.Markdown(label="Summary", show_label=False, elem_id="system-md")
    techniques = gr.Dataframe(
        label="Techniques on this machine", wrap=True, interactive=False, elem_id="system-table"
    )
    with gr.Accordion("As the API returns it", open=False):
        info = gr.JSON(label="System")
    gr.Button("Refresh", elem_id="system-btn").click(
        handlers["system"], None, [info, md, techniques], api_name="system"
    )
    tab.select(handlers["system"], None, [info, md, techniques], api_visibility="private")
