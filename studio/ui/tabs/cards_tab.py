"""The Cards tab: the fixed suite measured on this machine and written as a card (`/cards`), its progress
and Cancel (`studio.ui.progress_views`), a winner of the card into Generate, the regression report against
this machine's card before the run, "Compare two cards" (two cards of the studio's folder, nothing measured),
and the Machines view: the cards of many machines, one table per model (`/machines`), loaded when the tab
opens, and a winner of any of them into Generate."""

from __future__ import annotations

from typing import Any

import gradio as gr

from studio import devices
from studio.cards.options import DEFAULT_BUDGET_S, DEFAULT_ROUNDS, MIN_BUDGET_S
from studio.ui import views
from studio.ui.handlers.cards import STOPPING, suite_models
from studio.ui.progress_views import status_area, wire_job
from studio.ui.raw_fields import RawNumber
from studio.ui.widgets import sweep_counts

INTRO = (
    "The studio's fixed suite measured on this machine: for each model, the baseline (PyTorch fp32), the "
    "best configuration that **keeps the math** and the best that **changes the image**, measured in "
    "interleaved rounds and written as a card (JSON, a Markdown summary and a contact sheet) into the "
    "studio's `cards/` folder. Without configurations, the auto-tuner searches the suite's techniques "
    "within the time budget per model, after the first calls of the configurations measured before it; with "
    "them, those are measured instead. The cards compare across machines below (docs/cards.md)."
)
TWO_CARDS = (
    "Two cards of this machine in the studio's `cards/` folder, before and after an upgrade, compared "
    "configuration by configuration without measuring anything: slower or faster only beyond both cards' "
    "spreads (docs/cards.md). Cards of another machine or another suite version are refused."
)
MACHINES = (
    "## Machines\nOne table per model: this studio's cards, the project's own (docs/cards) and those of a "
    "folder or a Hugging Face dataset (OWNER/DATASET). Seconds, it/s and memory are the baseline's; compare "
    "rows of the same shape, and read the speedups, steadier across machines than the seconds."
)


def cards_tab(handlers: dict, generate: dict[str, Any], tabs: gr.Tabs, tab: gr.Tab) -> None:
    """Build the tab; a winner fills Generate's form (`generate["filled"]`) and shows it (`tabs`), and the
    Machines view loads whenever `tab` is selected."""
    gr.Markdown(INTRO)
    with gr.Row():
        device = gr.Dropdown(
            ["auto", *devices.detect().device_names],
            value="auto",
            label="Device",
            elem_id="cards-device",
            allow_custom_value=True,
        )
        names = suite_models("auto")
        models = gr.Dropdown(
            names,
            value=names[:1],
            multiselect=True,
            label="Models of the suite",
            elem_id="cards-models",
            scale=2,
            allow_custom_value=True,  # a model outside the suite is refused with the suite's models named
        )
        budget = RawNumber(
            DEFAULT_BUDGET_S,
            label=f"Budget per model: first calls + search (s, at least {MIN_BUDGET_S:g})",
            minimum=MIN_BUDGET_S,
            elem_id="cards-budget",
        )
        warmup, rounds = sweep_counts("cards", DEFAULT_ROUNDS)
    configs = gr.Textbox(
        "",
        lines=2,
        label="Configurations to measure instead of searching, one per line (empty: the suite's)",
        placeholder="channels_last\nopenvino[winograd=true]",
        elem_id="cards-configs",
    )
    plan = gr.Markdown(elem_id="cards-plan")  # what the budget covers and the run's expected time
    with gr.Row():
        go = gr.Button("Measure this machine", variant="primary", elem_id="cards-run-btn", scale=2)
        stop = gr.Button("Cancel", elem_id="cards-cancel-btn", scale=1)
    status = status_area("cards-status")
    with gr.Column(visible=False, elem_id="cards-results") as results:
        summary = gr.Markdown(label="Card summary", show_label=False, elem_id="cards-summary")
        sheet = gr.Image(
            label="Contact sheet: each model's baseline and winners",
            show_label=False,
            type="pil",
            format="png",
            interactive=False,
            elem_id="cards-sheet",
        )
        files = gr.Textbox(label="Files written", lines=3, interactive=False, elem_id="cards-files")
        with gr.Row():
            chosen = gr.Dropdown([], label="Winner", elem_id="cards-winner", scale=3)
            use = gr.Button("Use in Generate", interactive=False, elem_id="cards-use", scale=1)
        with gr.Accordion("The card as the API returns it", open=False):
            data = gr.JSON(label="Card")
        after_run = report_area("cards-run-regression")
    with gr.Accordion("Compare two cards", open=False, elem_id="cards-compare"):
        gr.Markdown(TWO_CARDS)
        with gr.Row():
            before = gr.Dropdown([], label="Before", elem_id="cards-before", scale=2)
            after = gr.Dropdown([], label="After", elem_id="cards-after", scale=2)
            compare = gr.Button("Compare", elem_id="cards-compare-btn", scale=1, min_width=120)
        two_cards = report_area("cards-compare-regression")
    regression = gr.State("")  # the report after a run (a State: /cards' clients get the card)
    inputs = {"models": models, "device": device, "budget_s": budget, "configs": configs}
    inputs.update(warmup=warmup, rounds=rounds)
    # What `/cards` fills, by name, in the order of its outputs (a client gets all but `results`, the layout,
    # and `regression`, a State).
    outputs = {"results": results, "summary": summary, "sheet": sheet, "files": files, "card": data}
    outputs.update(regression=regression)
    wire_job(
        (go, stop, status),
        **views.filling(handlers["cards"], outputs),
        reserve=handlers["cards_reserve"],
        cancel=handlers["cards_cancel"],
        stopping=STOPPING,
        inputs_kwargs=inputs,
        api_name="cards",
    )
    form = list(inputs.values())  # in the order `cards_plan` takes them
    said = {"fn": handlers["cards_plan"], "inputs": form, "outputs": plan, "api_visibility": "private"}
    gr.on([tab.select, *(c.change for c in form)], **said, queue=False, trigger_mode="always_last")
    device.change(handlers["cards_models"], [device, models], models, queue=False, api_visibility="private")
    filled = {**generate["filled"], "tabs": tabs}  # what a winner fills in Generate's form, by name
    use.click(
        **views.filling(handlers["use_card_winner"], filled),
        inputs=[data, chosen],
        queue=False,
        api_visibility="private",
    )
    gr.Markdown(MACHINES)
    with gr.Row():
        source = gr.Textbox(
            "",
            label="More cards: a folder, or a dataset as OWNER/DATASET (empty: this studio's and the "
            "project's)",
            elem_id="machines-source",
            scale=4,
        )
        load = gr.Button("Load", elem_id="machines-btn", scale=1)
    notes = gr.Markdown(label="Not read", show_label=False, elem_id="machines-notes")
    tables = gr.Markdown(label="Machines", show_label=False, elem_id="machines-md")
    with gr.Row():  # the menu as wide as the page: a winner's name reads machine first, configuration last
        pick = gr.Dropdown(
            [],
            label="A winner of these cards: machine — model and shape — kind: configuration",
            elem_id="machines-winner",
            scale=1,
        )
        apply = gr.Button(
            "No winner to use", interactive=False, elem_id="machines-use", scale=0, min_width=180
        )
    with gr.Accordion("As the API returns it", open=False):
        found = gr.JSON(label="Machines")
    loaded = gr.State([])  # the cards behind the tables, for the winners menu
    # What `/machines` fills, by name, in the order of its outputs (a client gets all but `cards`, a State).
    shown = {"tables": tables, "notes": notes, "machines": found, "cards": loaded}
    view = {**views.filling(handlers["machines"], shown), "inputs": source}
    load.click(**view, api_name="machines")
    tab.select(**view, api_visibility="private")
    loaded.change(handlers["machines_menu"], loaded, [pick, apply], queue=False, api_visibility="private")
    apply.click(
        **views.filling(handlers["use_card_winner"], filled),
        inputs=[loaded, pick],
        queue=False,
        api_visibility="private",
    )
    # A new card: its winners to choose from, and its row in the Machines tables.
    data.change(handlers["winners_menu"], data, [chosen, use], queue=False, api_visibility="private")
    data.change(**view, api_visibility="private")
    regression.change(
        **views.filling(handlers["regression_view"], after_run),
        inputs=regression,
        queue=False,
        api_visibility="private",
    )
    menus = {"fn": handlers["cards_menus"], "outputs": [before, after], "api_visibility": "private"}
    gr.on([tab.select, data.change], **menus, queue=False)
    compare.click(
        **views.filling(handlers["compare_cards"], two_cards),
        inputs=[before, after],
        api_visibility="private",
    )


def report_area(prefix: str) -> dict[str, Any]:
    """A regression report's place, hidden until there is one: the report (`prefix`-md), and its Markdown to
    copy into an issue (`prefix`-code), by the names `regression_view` fills."""
    with gr.Column(visible=False, elem_id=prefix) as area:
        report = gr.Markdown(elem_id=f"{prefix}-md")
        block = gr.Code(
            language="markdown",
            label="To paste into an issue",
            interactive=False,
            wrap_lines=True,
            show_line_numbers=False,
            max_lines=16,
            elem_id=f"{prefix}-code",
        )
    return {"area": area, "report": report, "block": block}
