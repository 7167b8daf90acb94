"""Form pieces several tabs share: the model inputs, Generate's technique boxes and their settings'
placeholder, a sweep's warm-up and round counts, and the one queue every generating event shares."""

from __future__ import annotations

import json
from typing import Any

import gradio as gr
from gradio.context import Context

from pipelines.registry import SPECS
from studio import devices, visitors
from studio.optimizations import REGISTRY
from studio.ui.handlers.common import (
    DEFAULT_MODEL,
    GROUPS,
    group_boxes,
    model_defaults,
    model_numbers,
    techniques_by_group,
    unavailable_list,
)
from studio.ui.raw_fields import RawNumber
from studio.ui.views import filling


def generation_concurrency() -> int:
    """One generation at a time per device: 1 on CPU or a single GPU, one per GPU otherwise; on a public
    studio one job more, whose runs take turns with the others' (`studio.engine.turns`): a long sweep of one
    visitor holds another's Generate behind one of its runs, not all of them."""
    hw = devices.detect()
    slots = max(1, len(hw.gpus)) if hw.cuda_functional else 1
    return slots + 1 if visitors.mode() == "private" else slots


def generation_queue() -> dict[str, Any]:
    """The event settings of everything that generates: one shared queue, `generation_concurrency()`
    events at once."""
    return {"concurrency_id": "generation", "concurrency_limit": generation_concurrency()}


def model_inputs(prefix: str) -> dict[str, Any]:
    """Model, custom model, device, prompt, seed, steps, guidance, width and height, by the request's field
    names (`custom_model` for the text beside the menu); the model's own defaults fill the form when the page
    loads and when the model changes. The fields themselves default to empty, which the request reads as the
    model's own: a client that names only another model gets that model's size and steps."""
    spec = SPECS[DEFAULT_MODEL]
    with gr.Row():
        model = gr.Dropdown(
            list(SPECS),
            value=DEFAULT_MODEL,
            label="Model",
            elem_id=f"{prefix}-model",
            scale=2,
            allow_custom_value=True,
        )
        custom = gr.Textbox(
            "",
            label="…or a hub id / local directory / .safetensors file",
            placeholder="owner/name, ./path or ./model.safetensors",
            scale=2,
        )
        device = gr.Dropdown(
            ["auto", *devices.detect().device_names],
            value="auto",
            label="Device",
            scale=1,
            allow_custom_value=True,
        )
    prompt = gr.Textbox(spec.example_prompt, label="Prompt", lines=2, elem_id=f"{prefix}-prompt")
    with gr.Row():
        seed = RawNumber(1, label="Seed (-1 = random)", precision=0, elem_id=f"{prefix}-seed")
        steps = RawNumber(None, label="Steps", precision=0, elem_id=f"{prefix}-steps")
        guidance = RawNumber(None, label="Guidance")
        width = RawNumber(None, label="Width", precision=0, step=8, elem_id=f"{prefix}-width")
        height = RawNumber(None, label="Height", precision=0, step=8, elem_id=f"{prefix}-height")
    # `input`, not `change`: a user's pick fills in the model's defaults; a run loaded into the form (History,
    # Load from image, a card's winner) sets the model and keeps its own steps, size and prompt.
    numbers = {"steps": steps, "guidance": guidance, "width": width, "height": height}
    defaults = {**numbers, "prompt": prompt}
    model.input(**filling(model_defaults, defaults), inputs=[model, custom], api_visibility="private")
    Context.root_block.load(  # what the page shows: the model's own, filled in (the API's default: empty)
        **filling(model_numbers, numbers),
        inputs=[model, custom],
        queue=False,
        api_visibility="private",
    )
    # by the request's field names (`custom_model`: the text beside the menu), in the API's order
    chosen = {"model": model, "custom_model": custom, "device": device}
    return {**chosen, "prompt": prompt, "seed": seed, **numbers}


def technique_groups() -> tuple[list[gr.CheckboxGroup], list[gr.Accordion], list[gr.Markdown]]:
    """One box group per role, for the default model; techniques that cannot run on it here are listed under
    each group with the reason (`techniques_for_model` redraws both when the model changes)."""
    groups = techniques_by_group("auto", SPECS[DEFAULT_MODEL].family)
    boxes, folds, lists = [], [], []
    with gr.Row(equal_height=False):
        for group in GROUPS:
            choices, missing = group_boxes(groups[group])
            with gr.Column(min_width=260, elem_id=f"group-{group}"):
                boxes.append(gr.CheckboxGroup(choices, label=group.title(), elem_id=f"optimizations-{group}"))
                label = f"Not available here ({len(missing)})"
                with gr.Accordion(label, open=False, visible=bool(missing)) as fold:
                    lists.append(gr.Markdown(unavailable_list(missing), elem_id=f"unavailable-{group}"))
                folds.append(fold)
    return boxes, folds, lists


def settings_placeholder() -> str:
    """An example of the technique settings JSON, from the first techniques that have settings."""
    example = {name: dict(list(opt.defaults.items())[:1]) for name, opt in REGISTRY.items() if opt.defaults}
    first = dict(list(example.items())[:2])
    return json.dumps(first) if first else ""


def sweep_counts(prefix: str, rounds: int):
    """A sweep's warm-up calls per configuration and its number of interleaved rounds."""
    warmup = RawNumber(
        1, label="Warm-up calls per configuration", precision=0, minimum=0, elem_id=f"{prefix}-warmup"
    )
    rounds_box = RawNumber(
        rounds,
        label="Rounds (each configuration once per round)",
        precision=0,
        minimum=1,
        elem_id=f"{prefix}-rounds",
    )
    return warmup, rounds_box


def lora_picker() -> gr.Dropdown:
    """Generate's LoRAs: each chosen as NAME:SCALE from those the LoRA folders hold (scale 1 as listed; type
    another scale, or a .safetensors path or hub id, as NAME:SCALE)."""
    from studio.engine.lora_listing import folders, lora_rows

    rows = lora_rows()
    return gr.Dropdown(
        [(f"{r['name']} ({r['base']}, rank {r['rank']})", f"{r['name']}:1") for r in rows],
        value=[],
        multiselect=True,
        allow_custom_value=True,
        label="LoRAs (NAME:SCALE; <lora:NAME:SCALE> in the prompt works too)",
        info=f"From {' and '.join(folders())}; scale 0 leaves one out, 1 is as trained.",
        elem_id="gen-loras",
    )
