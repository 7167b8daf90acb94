"""The Gradio Blocks app: Generate, Compare, Ladder, Auto-tune, History, Big models and System.

`build_demo()` returns the Blocks; `launch_kwargs()` the launch settings (theme, css,
queue sizes and file limits live there in Gradio 6). Endpoints: `/generate`, `/cancel`,
`/compare`, `/ladder`, `/autotune`, `/history`, `/load_config`, `/export_db`, `/shard`, `/system`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import gradio as gr

from pipelines.registry import SPECS
from pipelines.schedulers import SCHEDULERS
from studio import devices, report
from studio.engine import Studio
from studio.optimizations import REGISTRY
from studio.request import PRECISIONS
from studio.ui import handlers as h
from studio.ui.cancel import Cancellations
from studio.ui.fields import RawNumber

CSS_PATH = Path(__file__).resolve().parents[2] / "assets" / "studio.css"
DEFAULT_MODEL = h.DEFAULT_MODEL


def queue_size() -> int:
    return int(os.environ.get("STUDIO_QUEUE_MAX", "16"))


def generation_concurrency() -> int:
    """One generation at a time per device: 1 on CPU or a single GPU, one per GPU otherwise."""
    hw = devices.detect()
    return max(1, len(hw.gpus)) if hw.cuda_functional else 1


def _model_inputs(prefix: str):
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
            label="…or a hub id / local directory", placeholder="owner/name or ./path", scale=2
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
        seed = RawNumber(1, label="Seed (-1 = random)", precision=0)
        steps = RawNumber(spec.steps, label="Steps", precision=0, elem_id=f"{prefix}-steps")
        guidance = RawNumber(spec.guidance, label="Guidance")
        width = RawNumber(spec.width, label="Width", precision=0, step=8, elem_id=f"{prefix}-width")
        height = RawNumber(spec.height, label="Height", precision=0, step=8, elem_id=f"{prefix}-height")
    model.change(
        h.model_defaults, [model, custom], [steps, guidance, width, height, prompt], api_visibility="private"
    )
    return model, custom, device, prompt, seed, steps, guidance, width, height


def _technique_groups() -> list[gr.CheckboxGroup]:
    """One box group per role; techniques that cannot run here are listed under it with the reason."""
    groups = h.techniques_by_group("auto")
    boxes = []
    with gr.Row(equal_height=False):
        for group in h.GROUPS:
            usable = [t for t in groups[group] if t["unavailable"] is None]
            with gr.Column(min_width=260, elem_id=f"group-{group}"):
                boxes.append(
                    gr.CheckboxGroup(
                        [(f"{t['label']} ({t['name']})", t["name"]) for t in usable],
                        label=group.title(),
                        elem_id=f"opts-{group}",
                    )
                )
                missing = [t for t in groups[group] if t["unavailable"] is not None]
                if missing:
                    with gr.Accordion(f"Not available here ({len(missing)})", open=False):
                        gr.Markdown("\n".join(f"- **{t['name']}**: {t['unavailable']}" for t in missing))
    return boxes


def _generate_tab(handlers: dict) -> dict[str, Any]:
    with gr.Row(equal_height=False):
        with gr.Column(scale=3):
            model, custom, device, prompt, seed, steps, guidance, width, height = _model_inputs("gen")
            with gr.Row():
                usable = {t["name"] for t in report.availability() if t["unavailable"] is None}
                precision = gr.Radio(
                    [p for p in PRECISIONS if p == "fp32" or p in usable],
                    value="fp32",
                    label="Weights precision",
                    elem_id="gen-precision",
                )
                scheduler = gr.Dropdown(
                    list(SCHEDULERS), value="default", label="Scheduler", allow_custom_value=True
                )
                negative = gr.Textbox(label="Negative prompt")
            with gr.Row():
                go = gr.Button("Generate", variant="primary", elem_id="generate-btn")
                stop = gr.Button("Cancel", elem_id="cancel-btn")
                retry = gr.Button("Retry with …", visible=False, elem_id="retry-memory-btn")
        with gr.Column(scale=2):
            image = gr.Image(label="Image", type="pil", format="png", height=300, elem_id="gen-image")
            card = gr.Markdown(elem_id="metrics-card")
    with gr.Accordion("Optimizations", open=True):
        boxes = _technique_groups()
        settings = gr.Textbox(
            "", label="Technique settings (JSON)", elem_id="gen-settings", placeholder=settings_placeholder()
        )
    with gr.Accordion("Metrics (as the API returns them)", open=False):
        metrics = gr.JSON(label="Metrics")
    form = [
        model,
        custom,
        device,
        precision,
        *boxes,
        prompt,
        negative,
        seed,
        steps,
        guidance,
        width,
        height,
        scheduler,
        settings,
    ]
    event = go.click(
        handlers["generate_form"],
        form,
        [image, card, metrics],
        api_visibility="private",
        concurrency_id="generation",
        concurrency_limit=generation_concurrency(),
        show_progress_on=[image],
    )
    # The API's /generate takes the techniques as one list (a hidden field the form never reads).
    api_list = gr.Dropdown(
        sorted(REGISTRY),
        value=[],
        multiselect=True,
        visible=False,
        label="optimizations",
        allow_custom_value=True,
    )  # an unknown name reaches validation, which says why
    api_inputs = [
        model,
        custom,
        device,
        precision,
        api_list,
        prompt,
        negative,
        seed,
        steps,
        guidance,
        width,
        height,
        scheduler,
        settings,
    ]
    gr.Button(visible=False).click(
        handlers["generate"],
        api_inputs,
        [image, card, metrics],
        api_name="generate",
        concurrency_id="generation",
        concurrency_limit=generation_concurrency(),
    )
    stop.click(handlers["cancel"], None, card, queue=False, api_name="cancel")
    advice = gr.State([])
    event.failure(handlers["retry_offer"], None, [retry, advice], queue=False, api_visibility="private")
    retry.click(
        handlers["apply_advice"], [advice, boxes[1]], [retry, boxes[1]], queue=False, api_visibility="private"
    ).then(
        handlers["generate_form"],
        form,
        [image, card, metrics],
        concurrency_id="generation",
        concurrency_limit=generation_concurrency(),
        show_progress_on=[image],
        api_visibility="private",
    )
    return {
        "model": model,
        "custom": custom,
        "precision": precision,
        "boxes": boxes,
        "settings": settings,
        "targets": [
            model,
            custom,
            precision,
            *boxes,
            prompt,
            negative,
            seed,
            steps,
            guidance,
            width,
            height,
            scheduler,
            settings,
        ],
    }


def settings_placeholder() -> str:
    example = {name: dict(list(opt.defaults.items())[:1]) for name, opt in REGISTRY.items() if opt.defaults}
    first = dict(list(example.items())[:2])
    return json.dumps(first) if first else ""


def _sweep_counts(prefix: str, rounds: int):
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


def _compare_tab(handlers: dict) -> None:
    gr.Markdown(
        "The baseline and each configuration are timed in interleaved rounds (A B C, A B C, …), so a "
        "slower or faster minute of the machine hits them all alike. A speedup is the median of the "
        "per-round ratios, shown with its range; a range that crosses ×1.00 reads *within noise*."
    )
    model, custom, device, prompt, seed, steps, guidance, width, height = _model_inputs("cmp")
    with gr.Row():
        scheduler = gr.Dropdown(list(SCHEDULERS), value="default", label="Scheduler", allow_custom_value=True)
        warmup, rounds = _sweep_counts("cmp", 5)
    available = {t["name"] for t in report.availability() if t["unavailable"] is None}
    presets = [p for p in h.PRESETS if set(p.split(",")) <= available]
    configs = gr.CheckboxGroup(
        presets, value=presets[:2], label="Configurations (the baseline always runs)", elem_id="cmp-configs"
    )
    custom_configs = gr.Textbox(
        label="More configurations, one per line", placeholder="bf16,channels_last,sdpa", lines=2
    )
    go = gr.Button("Compare", variant="primary", elem_id="compare-btn")
    with gr.Column(visible=False, elem_id="cmp-results") as results:
        headline = gr.Markdown(elem_id="cmp-headline")
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
            details = gr.Dataframe(wrap=True, interactive=False, elem_id="cmp-details")
        lat = gr.BarPlot(
            x="configuration",
            y="latency (s)",
            title="Latency per image (median)",
            height=220,
            x_label_angle=0,
        )
        with gr.Row(equal_height=False):
            choice = gr.Dropdown([], label="Slider: baseline vs", scale=1)
            slider = gr.ImageSlider(
                label="Baseline | configuration", format="png", type="pil", elem_id="cmp-slider", scale=2
            )
        with gr.Row():
            csv_file = gr.File(label="CSV")
            md_file = gr.File(label="Markdown table")
        with gr.Accordion("Rows as the API returns them", open=False):
            rows = gr.JSON(label="Rows")
    images = gr.State({})
    inputs = [
        model,
        custom,
        device,
        prompt,
        seed,
        steps,
        guidance,
        width,
        height,
        scheduler,
        configs,
        custom_configs,
        warmup,
        rounds,
    ]
    outputs = [
        results,
        headline,
        gallery,
        table,
        details,
        lat,
        choice,
        slider,
        images,
        csv_file,
        md_file,
        rows,
    ]
    go.click(
        handlers["compare"],
        inputs,
        outputs,
        api_name="compare",
        concurrency_id="generation",
        concurrency_limit=generation_concurrency(),
        show_progress_on=[go],
    )
    choice.change(
        lambda c, imgs: (imgs["baseline"], imgs[c]) if c in imgs else None,
        [choice, images],
        slider,
        api_visibility="private",
    )


def _ladder_tab(handlers: dict) -> None:
    gr.Markdown(
        "The diffusers documentation's speed ladder on this machine: each step adds one technique to the "
        "previous ones, all steps timed in interleaved rounds. Steps that cannot run here are shown as "
        "skipped, with the reason."
    )
    model, custom, device, prompt, seed, steps, _guidance, width, height = _model_inputs("lad")
    with gr.Row():
        warmup, rounds = _sweep_counts("lad", 5)
    go = gr.Button("Run the ladder", variant="primary", elem_id="ladder-btn")
    with gr.Column(visible=False, elem_id="ladder-results") as results:
        md = gr.Markdown(elem_id="ladder-md")
        table = gr.Dataframe(label="Ladder", wrap=True, interactive=False, elem_id="ladder-table")
        with gr.Accordion("Rows as the API returns them", open=False):
            rows = gr.JSON(label="Rows")
    go.click(
        handlers["ladder"],
        [model, custom, device, prompt, seed, steps, width, height, warmup, rounds],
        [results, md, table, rows],
        api_name="ladder",
        concurrency_id="generation",
        concurrency_limit=generation_concurrency(),
        show_progress_on=[go],
    )


def _autotune_tab(handlers: dict, generate: dict, tabs: gr.Tabs) -> None:
    gr.Markdown(
        "The fastest configuration whose image stays within a quality floor of the baseline's: each "
        "technique "
        "alone (techniques with settings over a small grid), then the survivors combined greedily, then the "
        "winner confirmed against the baseline in its own interleaved rounds. Only a winner the confirmation "
        "measured faster beyond noise is offered."
    )
    model, custom, device, prompt, seed, steps, _guidance, width, height = _model_inputs("tune")
    names = [t["name"] for t in report.availability() if t["unavailable"] is None]
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
        min_psnr = RawNumber(30, label="Min PSNR vs baseline (dB)")
        min_ssim = RawNumber(0.95, label="Min SSIM")
        fidelity_drop = RawNumber(0.03, label="Max prompt-fidelity drop (tiny-shapes)")
        warmup, rounds = _sweep_counts("tune", 3)
        confirm = RawNumber(5, label="Confirmation rounds", precision=0, minimum=1, elem_id="tune-confirm")
    with gr.Row():
        go = gr.Button("Auto-tune", variant="primary", elem_id="tune-btn")
        apply = gr.Button("Apply the winner in Generate", interactive=False, elem_id="tune-apply")
    with gr.Column(visible=False, elem_id="tune-results") as results:
        md = gr.Markdown(elem_id="tune-md")
        table = gr.Dataframe(
            label="Every configuration measured", wrap=True, interactive=False, elem_id="tune-table"
        )
        with gr.Row():
            quality = gr.ScatterPlot(
                x="latency_s",
                y="psnr_db",
                color="config",
                title="Latency (s) vs PSNR (dB, capped at 100)",
                tooltip=["config", "latency_s", "psnr_db"],
                height=260,
            )
            memory = gr.ScatterPlot(
                x="latency_s",
                y="peak_memory_mb",
                color="config",
                title="Latency (s) vs peak memory (MB)",
                tooltip=["config", "latency_s", "peak_memory_mb"],
                height=260,
            )
        with gr.Accordion("Result as the API returns it", open=False):
            data = gr.JSON(label="Result")
    winner = gr.State(None)
    inputs = [
        model,
        custom,
        device,
        prompt,
        seed,
        steps,
        width,
        height,
        techniques,
        include_compile,
        min_psnr,
        min_ssim,
        fidelity_drop,
        warmup,
        rounds,
        confirm,
    ]
    go.click(
        handlers["autotune"],
        inputs,
        [results, md, table, quality, memory, data, winner, apply],
        api_name="autotune",
        concurrency_id="generation",
        concurrency_limit=generation_concurrency(),
        show_progress_on=[go],
    )
    apply.click(
        handlers["apply_winner"],
        winner,
        [generate["precision"], *generate["boxes"], generate["settings"], tabs],
        queue=False,
        api_visibility="private",
    )


def _history_tab(handlers: dict, generate: dict, tabs: gr.Tabs, tab: gr.Tab) -> None:
    with gr.Row():
        model = gr.Textbox(label="Model")
        device = gr.Textbox(label="Device")
        status = gr.Dropdown(list(h.STATUSES), value="", label="Status", allow_custom_value=True)
        technique = gr.Dropdown(["", *REGISTRY], value="", label="Technique", allow_custom_value=True)
        since = gr.Textbox(label="Since (ISO date)", placeholder="2026-11-01")
        limit = RawNumber(200, label="Rows", precision=0, minimum=1, maximum=5000)
    refresh = gr.Button("Refresh", elem_id="history-btn")
    gr.Markdown("Click a row to load that run's configuration into Generate.")
    table = gr.Dataframe(label="Runs", wrap=True, max_height=360, interactive=False, elem_id="history-table")
    plot = gr.LinePlot(
        x="time",
        y="latency (s)",
        color="configuration",
        title="Latency per image over time",
        x_axis_format="%m-%d %H:%M",
        x_label_angle=0,
        height=260,
    )
    with gr.Row():
        csv_file = gr.File(label="CSV of these runs")
        db_btn = gr.DownloadButton("Download the database")
    filters = [model, device, status, technique, since, limit]
    refresh.click(handlers["history"], filters, [table, plot, csv_file], api_name="history")
    tab.select(handlers["history"], filters, [table, plot, csv_file], api_visibility="private")
    db_btn.click(handlers["export_db"], None, db_btn, api_name="export_db")
    run_id = RawNumber(visible=False, precision=0, label="run_id")
    gr.Button(visible=False).click(
        handlers["load_config"], run_id, [*generate["targets"], tabs], api_name="load_config"
    )
    table.select(handlers["load_selected"], table, [*generate["targets"], tabs], api_visibility="private")


def _system_tab(handlers: dict, tab: gr.Tab) -> None:
    md = gr.Markdown(elem_id="system-md")
    techniques = gr.Dataframe(
        label="Techniques on this machine", wrap=True, interactive=False, elem_id="system-table"
    )
    with gr.Accordion("As the API returns it", open=False):
        info = gr.JSON(label="System")
    gr.Button("Refresh", elem_id="system-btn").click(
        handlers["system"], None, [info, md, techniques], api_name="system"
    )
    tab.select(handlers["system"], None, [info, md, techniques], api_visibility="private")


def _shard_tab(handlers: dict) -> None:
    gr.Markdown(
        "Save a model's components as sharded safetensors (seed: *Working with big models*). The folder is "
        "created under the studio's home, in `sharded/<name>`; load it back by typing its path in Generate's "
        "model field (its parent must be in `STUDIO_MODEL_ROOTS`, which the report says)."
    )
    with gr.Row():
        model = gr.Dropdown(list(SPECS), value=DEFAULT_MODEL, label="Model", allow_custom_value=True)
        custom = gr.Textbox(label="…or a hub id / local directory")
        name = gr.Textbox("tiny-shapes-sharded", label="Folder name", elem_id="shard-name")
        size = gr.Textbox("1MB", label="Max shard size", placeholder="500KB, 1MB, 5GB", elem_id="shard-size")
    go = gr.Button("Save sharded", variant="primary", elem_id="shard-btn")
    table = gr.Dataframe(label="Shards", wrap=True, elem_id="shard-table")
    report = gr.JSON(label="Report (as the API returns it)")
    go.click(
        handlers["shard"],
        [model, custom, name, size],
        [report, table],
        api_name="shard",
        concurrency_id="generation",
        concurrency_limit=generation_concurrency(),
    )


def build_demo(studio: Studio | None = None) -> gr.Blocks:
    """The whole app around one Studio (a new one on the default database if not given)."""
    studio = studio or Studio()
    handlers = h.build_handlers(studio, Cancellations())
    with gr.Blocks(title="Diffusion Studio") as demo:
        gr.Markdown(
            "# Diffusion Studio\nRun diffusers pipelines fast, and measure it honestly.", elem_id="title"
        )
        with gr.Tabs() as tabs:
            with gr.Tab("Generate", id="generate"):
                generate = _generate_tab(handlers)
            with gr.Tab("Compare", id="compare"):
                _compare_tab(handlers)
            with gr.Tab("Ladder", id="ladder"):
                _ladder_tab(handlers)
            with gr.Tab("Auto-tune", id="autotune"):
                _autotune_tab(handlers, generate, tabs)
            with gr.Tab("History", id="history") as history:
                _history_tab(handlers, generate, tabs, history)
            with gr.Tab("Big models", id="shard"):
                _shard_tab(handlers)
            with gr.Tab("System", id="system") as system:
                _system_tab(handlers, system)
    demo.queue(max_size=queue_size(), default_concurrency_limit=1)
    return demo


def launch_kwargs() -> dict[str, Any]:
    """Launch settings: theme and css live here in Gradio 6, and the upload limit."""
    auth = os.environ.get("STUDIO_AUTH")
    return {
        "theme": gr.themes.Soft(),
        "css_paths": [CSS_PATH] if CSS_PATH.exists() else None,
        "max_file_size": "10mb",
        "auth": tuple(auth.split(":", 1)) if auth and ":" in auth else None,
        "footer_links": ["api", "gradio"],
    }
