"""The Generate tab: the form, its Generate, Cancel and 'Retry with …' buttons, "Load from image", and the
API's `/generate`, `/cancel` and `/read_image`. Each view says what the last action did: a cancelled or
refused run clears the last run's image and card, the first call's note follows the form and each run, and
techniques that cannot combine are said under their boxes as soon as they are ticked."""

from __future__ import annotations

from typing import Any

import gradio as gr

from pipelines.schedulers import menu_choices
from studio.optimizations import REGISTRY, availability
from studio.request import PRECISIONS
from studio.ui.handlers.common import (
    FILLED,
    TECHNIQUE_BOXES,
    TECHNIQUE_PARTS,
    in_form_order,
    techniques_for_model,
)
from studio.ui.handlers.generate import STOPPING
from studio.ui.progress_views import clears_toasts, wire_cancel
from studio.ui.raw_fields import RawNumber
from studio.ui.views import filling
from studio.ui.widgets import (
    generation_queue,
    lora_picker,
    model_inputs,
    settings_placeholder,
    technique_groups,
)

# After Load from image: the form it filled is brought into view (the drop zone sits below it).
SHOW_FORM = "() => document.querySelector('#gen-prompt').scrollIntoView({block: 'center'})"


def generate_tab(handlers: dict) -> dict[str, Any]:
    """Build the tab; returns the components other tabs fill in (`targets`: what a logged run sets, in order;
    `filled`: the same by field name; `loaded_run`: where the run loaded into the form is named)."""
    with gr.Row(equal_height=False):
        with gr.Column(scale=3):
            loaded_run = gr.Markdown(elem_id="gen-loaded-note")
            fields = model_inputs("gen")
            with gr.Row():
                usable = {t["name"] for t in availability() if t["unavailable"] is None}
                precision = gr.Radio(
                    [p for p in PRECISIONS if p == "fp32" or p in usable],
                    value="fp32",
                    label="Weights precision",
                    elem_id="gen-precision",
                )
                scheduler = gr.Dropdown(
                    menu_choices(), value="default", label="Scheduler", allow_custom_value=True
                )
                negative = gr.Textbox("", label="Negative prompt")
                batch = RawNumber(
                    1, label="Batch (images per prompt)", precision=0, minimum=1, elem_id="gen-batch"
                )
            loras = lora_picker()
            with gr.Row():
                go = gr.Button("Generate", variant="primary", elem_id="generate-btn")
                stop = gr.Button("Cancel", elem_id="cancel-btn")
                retry = gr.Button("Retry with …", visible=False, elem_id="retry-memory-btn")
                fit = gr.Button("Will it fit?", elem_id="fit-btn")
            fit_note = gr.Markdown(elem_id="fit-note")
            first_note = gr.Markdown(elem_id="first-call-note")
        with gr.Column(scale=2):
            image = gr.Image(label="Image", type="pil", format="png", height=300, elem_id="gen-image")
            each_image = gr.Gallery(
                label="Each image of the batch",
                columns=4,
                height="auto",
                object_fit="contain",
                format="png",
                visible=False,
                elem_id="gen-each-image",
            )
            card = gr.Markdown(label="Metrics card", show_label=False, elem_id="metrics-card")
    with gr.Accordion("Optimizations", open=True):
        boxes, folds, lists = technique_groups()
        conflicts = gr.Markdown(elem_id="gen-conflicts")  # ticked techniques that cannot combine
        settings = gr.Textbox(
            "", label="Technique settings (JSON)", elem_id="gen-settings", placeholder=settings_placeholder()
        )
    with gr.Accordion("Model files: VAE override, single-file config", open=False):
        with gr.Row():
            vae = gr.Textbox(
                "",
                label="VAE to swap in: AutoencoderKL folder, .safetensors file or hub id (empty: model's)",
                elem_id="gen-vae",
            )
            single_file_config = gr.Textbox(
                "",
                label="For a .safetensors model: the diffusers folder its configs come from",
                elem_id="gen-single-file-config",
            )
    with gr.Accordion("Load from image", open=False):
        with gr.Row(equal_height=False):
            png = gr.File(
                label="A PNG saved by the studio (or by A1111): its settings fill the form",
                file_types=[".png"],
                type="filepath",
                height=120,
                elem_id="load-image",
            )
            loaded = gr.Markdown(elem_id="load-image-note")
    with gr.Accordion("Metrics (as the API returns them)", open=False):
        metrics = gr.JSON(label="Metrics")
    fields.update(precision=precision, negative_prompt=negative, scheduler=scheduler, settings=settings)
    fields.update(batch=batch, vae=vae, single_file_config=single_file_config, loras=loras)
    # The form reads the techniques from its boxes, the API's /generate from one list (a hidden field).
    form = in_form_order({**fields, **dict(zip(TECHNIQUE_BOXES, boxes, strict=True))})
    api_list = gr.Dropdown(
        sorted(REGISTRY),
        value=[],
        multiselect=True,
        visible=False,
        label="optimizations",
        allow_custom_value=True,
    )  # an unknown name reaches validation, which says why
    api = in_form_order({**fields, "optimizations": api_list})
    generation = generation_queue()
    shown = {"image": image, "card": card, "metrics": metrics, "loaded": loaded_run, "batch": each_image}
    run_form = {
        **filling(handlers["generate_form"], shown),
        "inputs_kwargs": form,
        "api_visibility": "private",
        "show_progress_on": [image],
        **generation,
    }
    # The cancel flag is made at the click, outside the queue: a Cancel while the run waits is not lost.
    clears_toasts(go)
    event = go.click(handlers["generate_reserve"], None, None, queue=False, api_visibility="private").then(
        api_name="generate_form",  # the private events' own names: /generate is the API's
        **run_form,
    )
    gr.Button(visible=False).click(
        handlers["generate"],
        inputs_kwargs=api,
        outputs=[image, card, metrics],
        api_name="generate",
        **generation,
    )
    wire_cancel(stop, card, handlers["generate_cancel"], STOPPING, api_name="cancel")
    fit.click(handlers["estimate_form"], inputs_kwargs=form, outputs=fit_note, api_visibility="private")
    gr.Button(visible=False).click(
        handlers["estimate"],
        inputs_kwargs=api,
        outputs=gr.JSON(visible=False, label="Estimate"),
        api_name="estimate",
    )
    advice = gr.State([])
    event.failure(handlers["retry_offer"], None, [retry, advice], queue=False, api_visibility="private")
    again = retry.click(
        handlers["apply_advice"], [advice, boxes[1]], [retry, boxes[1]], queue=False, api_visibility="private"
    ).then(api_name="generate_retry", **run_form)
    # after each run: a refusal's toast (the card says it too), and the first call's note as it is now
    note = {"inputs_kwargs": form, "outputs": first_note, "queue": False, "api_visibility": "private"}
    for run in (event, again):
        run.then(handlers["refusal_toast"], None, None, api_visibility="private")  # queued: shows its toast
        run.then(handlers["first_call_note"], **note)
    gr.on(
        [precision.change, *(b.change for b in boxes)],
        handlers["conflicts_note"],
        [precision, *boxes],
        conflicts,
        queue=False,
        trigger_mode="always_last",
        api_visibility="private",
    )
    # what the first call of the form's configuration cost before, said before it is started
    gr.on(
        [*(b.change for b in boxes), fields["model"].change, precision.change, fields["device"].change]
        + [fields[n].blur for n in ("width", "height", "custom_model")],
        handlers["first_call_note"],
        trigger_mode="always_last",  # a tick while the last answer is on its way is answered too
        **note,
    )
    model, custom = fields["model"], fields["custom_model"]
    parts = dict(zip(TECHNIQUE_PARTS, [*boxes, *folds, *lists], strict=True))
    redraw = {**filling(techniques_for_model, parts), "inputs": [model, custom, *boxes], "queue": False}
    model.change(**redraw, api_visibility="private")
    custom.blur(**redraw, api_visibility="private")
    filled = {name: form[name] for name in FILLED}  # what a logged run or an image fills, by name
    targets = list(filled.values())
    png.upload(
        **filling(handlers["load_image"], {**filled, "note": loaded}), inputs=png, api_visibility="private"
    ).then(None, js=SHOW_FORM, queue=False, api_visibility="private")  # what it filled, in sight
    found = gr.JSON(visible=False, label="Image settings")
    gr.Button(visible=False).click(handlers["read_image"], png, found, api_name="read_image")
    return {
        "model": model,
        "custom": custom,
        "precision": precision,
        "boxes": boxes,
        "settings": settings,
        "targets": targets,
        "filled": filled,
        "loaded_run": loaded_run,
    }
