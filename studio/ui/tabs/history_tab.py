"""The History tab: the run log filtered (`/history`), as a table, a gallery of the same runs' images (one
picked shows large with its run's settings, its seed or its whole run back into Generate), a plot and a CSV,
the database to download (`/export_db`), a logged run loaded back into Generate (`/load_config`, or a click on
a row), and "Speed over library versions" (`/timeline`): did an upgrade make a configuration slower on this
machine?"""

from __future__ import annotations

from typing import Any

import gradio as gr

from studio import visitors
from studio.optimizations import REGISTRY
from studio.ui.gallery_views import GALLERY_SIZE, LARGE_SIDE, NOTHING_PICKED
from studio.ui.handlers.common import DEFAULT_MODEL
from studio.ui.handlers.history import ERA_COLUMNS
from studio.ui.raw_fields import RawNumber
from studio.ui.views import filling

STATUSES = ("", "ok", "failed", "cancelled", "interrupted", "running")
SPEED_READ_ME = (
    "One configuration's finished runs on this machine (same CPU and GPUs, model, size, steps, batch and "
    "device), grouped into eras by the versions of the libraries that change speed (torch, diffusers, "
    "transformers, accelerate, OpenVINO, NNCF, torchao, the studio). An era is judged against the one "
    "before: *slower* or *faster* only beyond both eras' spreads, else *within noise*. The eras were "
    "measured apart, not interleaved: confirm a verdict with one Compare run."
)
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
    whose = gr.Markdown("", elem_id="visitor-note")
    gr.Markdown(READ_ME)
    table = gr.Dataframe(label="Runs", wrap=True, max_height=360, interactive=False, elem_id="history-table")
    gallery = images_of_runs(handlers, generate, tabs)
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
    private = visitors.mode() == "private"
    with gr.Row(visible=private):
        mine_btn = gr.DownloadButton("Download my history (runs and images)", elem_id="my-history-btn")
        forget_btn = gr.Button("Delete my history…", variant="stop", elem_id="forget-btn")
    with gr.Row(visible=False) as confirm_row:
        gr.Markdown("Every run and image of yours will be deleted from this studio; it cannot be undone.")
        confirm_btn = gr.Button("Yes, delete them", variant="stop", elem_id="forget-confirm-btn")
        keep_btn = gr.Button("Keep them", elem_id="forget-keep-btn")
    forgotten = gr.Markdown("", label="deleted", elem_id="forget-note")
    filters = [model, device, status, technique, since, limit]
    # The form answers a bad filter with a sentence (`note`) and keeps its view; the API's /history raises it.
    viewed = {"table": table, "plot": plot, "csv": csv_file, "note": note, **gallery}
    form_view = {**filling(handlers["history_form"], viewed), "inputs": filters, "api_visibility": "private"}
    refresh.click(**form_view)
    tab.select(**form_view)
    for picked in (status, technique):  # a filter picked from a list applies at once; typed ones on Enter
        picked.input(**form_view)
    for typed in (model, device, since, limit):
        typed.submit(**form_view)
    records = gr.JSON(visible=False, label="records")  # the API's: the runs in the shared vocabulary
    answer = {"table": table, "plot": plot, "csv": csv_file, "records": records}
    gr.Button(visible=False).click(**filling(handlers["history"], answer), inputs=filters, api_name="history")
    # A download button downloads the file it holds when clicked, then its handler makes the next one: each
    # is given its file when the tab opens, so the first click downloads.
    db_btn.click(handlers["export_db"], None, db_btn, api_name="export_db")
    mine_btn.click(handlers["my_history"], None, mine_btn, api_name="my_history")
    tab.select(handlers["export_db"], None, db_btn, api_visibility="private")
    if private:
        tab.select(handlers["my_history"], None, mine_btn, api_visibility="private")
    shown_row, hidden_row = (lambda: gr.update(visible=True)), (lambda: gr.update(visible=False))
    forget_btn.click(shown_row, None, confirm_row, queue=False, api_visibility="private")
    keep_btn.click(hidden_row, None, confirm_row, queue=False, api_visibility="private")
    confirm_btn.click(handlers["forget_my_history"], None, forgotten, api_name="forget_my_history").then(
        hidden_row, None, confirm_row, queue=False, api_visibility="private"
    ).then(**form_view)
    tab.select(handlers["visitor_note"], None, whose, api_visibility="private")
    run_id = RawNumber(visible=False, precision=0, label="run_id")
    form = {**generate["filled"], "tabs": tabs}
    gr.Button(visible=False).click(
        **filling(handlers["load_config"], form), inputs=run_id, api_name="load_config"
    )
    picked = {**form, "loaded": generate["loaded_run"]}
    table.select(**filling(handlers["load_selected"], picked), inputs=table, api_visibility="private")
    speed_over_versions(handlers)


def images_of_runs(handlers: dict, generate: dict[str, Any], tabs: gr.Tabs) -> dict[str, Any]:
    """The gallery of the runs the table shows (filled with it: the components returned by the names
    `history_form` gives them); an image picked shows large beside it with its run's settings, "Reuse this
    seed" (its seed alone into Generate) and "Send to Generate" (its whole run, as a click on its row)."""
    with gr.Row(equal_height=False):
        gallery = gr.Gallery(
            label=f"Images of these runs, the newest {GALLERY_SIZE} (pick one)",
            columns=3,
            fit_columns=False,
            height="auto",
            object_fit="contain",
            format="png",
            allow_preview=False,
            interactive=False,
            scale=2,
            elem_id="history-gallery",
        )
        with gr.Column(scale=1, min_width=380):
            large = gr.Image(  # a small image is shown enlarged: no download of that copy
                label="Picked",
                show_label=False,
                interactive=False,
                height=LARGE_SIDE,
                buttons=["fullscreen"],
                elem_id="history-large",
            )
            picked = gr.Markdown(NOTHING_PICKED, elem_id="history-picked")
            with gr.Row():
                reuse = gr.Button("Reuse this seed", interactive=False, elem_id="history-reuse-seed")
                send = gr.Button("Send to Generate", interactive=False, elem_id="history-send")
    images = gr.State([])  # the run behind each thumbnail and the image's place in it
    picked_run = gr.State(None)  # the run of the picked image, for the buttons
    shown = {"large": large, "picked": picked, "picked_run": picked_run, "reuse": reuse, "send": send}
    gallery.select(**filling(handlers["pick_image"], shown), inputs=images, api_visibility="private")
    seed = {"seed": generate["filled"]["seed"], "loaded": generate["loaded_run"], "tabs": tabs}
    reuse.click(**filling(handlers["reuse_seed"], seed), inputs=picked_run, api_visibility="private")
    form = {**generate["filled"], "loaded": generate["loaded_run"], "tabs": tabs}
    send.click(**filling(handlers["send_picked"], form), inputs=picked_run, api_visibility="private")
    return {"gallery": gallery, "images": images, **shown}


def speed_over_versions(handlers: dict) -> None:
    """ "Speed over library versions": a configuration's eras (`/timeline`) as a table, a plot of each run's
    seconds per image coloured by era, and the Markdown block to copy into an issue."""
    with gr.Accordion("Speed over library versions", open=False, elem_id="timeline-section"):
        gr.Markdown(SPEED_READ_ME)
        with gr.Row():
            model = gr.Textbox(DEFAULT_MODEL, label="Model", elem_id="timeline-model")
            config = gr.Textbox(
                "baseline",
                label="Configuration, as Compare writes it",
                placeholder="bf16+channels_last",
                elem_id="timeline-config",
                scale=2,
            )
            device = gr.Textbox("auto", label="Device", elem_id="timeline-device")
        with gr.Row():
            # text, not number fields: a number field shows an empty value as 0, which no model runs at
            own = "the model's own"
            steps = gr.Textbox("", label="Steps", placeholder=own, elem_id="timeline-steps")
            width = gr.Textbox("", label="Width", placeholder=own, elem_id="timeline-width")
            height = gr.Textbox("", label="Height", placeholder=own, elem_id="timeline-height")
            batch = RawNumber(1, label="Batch", precision=0, minimum=1, elem_id="timeline-batch")
        go = gr.Button("Show the timeline", elem_id="timeline-btn")
        note = gr.Markdown("", elem_id="timeline-note")
        with gr.Column(visible=False, elem_id="timeline-results") as results:
            table = gr.Dataframe(
                headers=list(ERA_COLUMNS),
                datatype=["number", "number", "str", "markdown", "str", "str", "str"],
                column_widths=["5%", "5%", "15%", "37%", "12%", "8%", "18%"],
                label="Eras",
                wrap=True,
                interactive=False,
                elem_id="timeline-table",
            )
            plot = gr.ScatterPlot(
                x="time",
                y="s / image",
                color="era",
                title="Seconds per image of each run, coloured by the versions it ran under",
                label="Seconds per image over time",
                show_label=False,
                x_label_angle=0,
                height=280,
                elem_id="timeline-plot",
            )
            markdown = gr.Code(
                language="markdown",
                label="To paste into an issue",
                interactive=False,
                wrap_lines=True,
                show_line_numbers=False,
                max_lines=16,
                elem_id="timeline-markdown",
            )
    form = [model, config, steps, width, height, batch, device]
    shown = {"table": table, "plot": plot, "markdown": markdown}
    view = {**shown, "note": note, "results": results}
    go.click(**filling(handlers["timeline_form"], view), inputs=form, api_visibility="private")
    eras = gr.JSON(visible=False, label="eras")  # the API's: each era as `Era.as_json` writes it
    answer = {"table": table, "plot": plot, "markdown": markdown, "eras": eras}  # /timeline's, in this order
    gr.Button(visible=False).click(**filling(handlers["timeline"], answer), inputs=form, api_name="timeline")
