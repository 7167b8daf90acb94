"""The Gradio Blocks app: Generate, Compare, Ladder, History and System.

`build_demo()` returns the Blocks; `launch_kwargs()` the launch settings (theme, css,
queue sizes and file limits live there in Gradio 6). Endpoints: `/generate`,
`/compare`, `/ladder`, `/history`, `/system`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import gradio as gr

from pipelines.loader import SCHEDULERS
from pipelines.registry import SPECS
from studio import api, devices
from studio.optimizations import REGISTRY
from studio.service import Studio
from studio.ui import handlers as h

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
        model = gr.Dropdown(list(SPECS), value=DEFAULT_MODEL, label="Model", elem_id=f"{prefix}-model", scale=2,
                            allow_custom_value=True)
        custom = gr.Textbox(label="…or a hub id / local directory", placeholder="owner/name or ./path", scale=2)
        device = gr.Dropdown(["auto", *devices.detect().device_names], value="auto", label="Device", scale=1,
                             allow_custom_value=True)
    prompt = gr.Textbox(spec.example_prompt, label="Prompt", lines=2, elem_id=f"{prefix}-prompt")
    with gr.Row():
        seed = gr.Number(1, label="Seed (-1 = random)", precision=0)
        steps = gr.Number(spec.steps, label="Steps", precision=0, elem_id=f"{prefix}-steps")
        guidance = gr.Number(spec.guidance, label="Guidance")
        width = gr.Number(spec.width, label="Width", precision=0, step=8)
        height = gr.Number(spec.height, label="Height", precision=0, step=8)
    model.change(h._model_defaults, [model, custom], [steps, guidance, width, height, prompt], api_visibility="private")
    return model, custom, device, prompt, seed, steps, guidance, width, height


def _technique_boxes() -> tuple[list[gr.Checkbox], list[str]]:
    boxes, names = [], []
    groups = h._techniques_by_group("auto")  # the same order as h._checkbox_names()
    with gr.Row(equal_height=False):
        for group in h.GROUPS:
            with gr.Column(min_width=220), gr.Group():
                gr.Markdown(f"**{group.title()}**", elem_classes="group-title")
                for t in groups[group]:
                    boxes.append(gr.Checkbox(label=f"{t['label']} ({t['name']})", info=t["unavailable"],
                                             interactive=t["unavailable"] is None, elem_id=f"opt-{t['name']}"))
                    names.append(t["name"])
    return boxes, names


def _generate_tab(handlers: dict) -> dict[str, Any]:
    with gr.Row(equal_height=False):
        with gr.Column(scale=3):
            model, custom, device, prompt, seed, steps, guidance, width, height = _model_inputs("gen")
            with gr.Row():
                usable = {t["name"] for t in api.techniques() if t["unavailable"] is None}
                precision = gr.Radio([p for p in api.PRECISIONS if p == "fp32" or p in usable], value="fp32",
                                     label="Weights precision")
                scheduler = gr.Dropdown(list(SCHEDULERS), value="default", label="Scheduler", allow_custom_value=True)
                negative = gr.Textbox(label="Negative prompt")
            with gr.Row():
                go = gr.Button("Generate", variant="primary", elem_id="generate-btn")
                stop = gr.Button("Cancel", variant="stop", elem_id="cancel-btn")
                retry = gr.Button("Retry with …", visible=False, elem_id="retry-memory-btn")
        with gr.Column(scale=2):
            image = gr.Image(label="Image", type="pil", format="png", height=300, elem_id="gen-image")
            card = gr.Markdown(elem_id="metrics-card")
    with gr.Accordion("Optimizations (unavailable ones are disabled, with the reason)", open=True):
        boxes, names = _technique_boxes()
        settings = gr.Textbox("", label="Technique settings (JSON)", placeholder='{"torch_compile": {"mode": "max-autotune"}}')
    with gr.Accordion("Metrics (as the API returns them)", open=False):
        metrics = gr.JSON(label="Metrics")
    selected = gr.Dropdown(names, value=[], multiselect=True, allow_custom_value=True, label="Selected optimizations",
                           visible=False)
    for box in boxes:
        box.change(lambda *v: [n for n, on in zip(names, v, strict=True) if on], boxes, selected, queue=False,
                   api_visibility="private")
    inputs = [model, custom, device, precision, selected, prompt, negative, seed, steps, guidance, width, height,
              scheduler, settings]
    event = go.click(handlers["generate"], inputs, [image, card, metrics], api_name="generate",
                     concurrency_id="generation", concurrency_limit=generation_concurrency(), show_progress_on=[image])
    stop.click(handlers["cancel"], None, card, cancels=[event], queue=False, api_name="cancel")
    advice = gr.State([])
    event.failure(handlers["retry_offer"], None, [retry, advice], queue=False, api_visibility="private")
    retry.click(handlers["apply_advice"], [advice, selected], [retry, selected, *boxes], queue=False,
                api_visibility="private").then(
        handlers["generate"], inputs, [image, card, metrics], concurrency_id="generation",
        concurrency_limit=generation_concurrency(), show_progress_on=[image], api_visibility="private")
    return {"inputs": inputs, "boxes": boxes, "names": names}


def _compare_tab(handlers: dict) -> None:
    model, custom, device, prompt, seed, steps, guidance, width, height = _model_inputs("cmp")
    with gr.Row():
        scheduler = gr.Dropdown(list(SCHEDULERS), value="default", label="Scheduler", allow_custom_value=True)
        warmup = gr.Number(1, label="Warm-up runs", precision=0, elem_id="cmp-warmup")
        repeats = gr.Number(3, label="Timed repeats", precision=0, elem_id="cmp-repeats")
    available = {t["name"] for t in api.techniques() if t["unavailable"] is None}
    presets = [p for p in h.PRESETS if set(p.split(",")) <= available]
    configs = gr.CheckboxGroup(presets, value=presets[:2], label="Configurations (baseline always runs)")
    custom_configs = gr.Textbox(label="More configurations, one per line", placeholder="bf16,channels_last,sdpa", lines=2)
    go = gr.Button("Compare", variant="primary", elem_id="compare-btn")
    gallery = gr.Gallery(label="Side by side", columns=4, height=260, elem_id="cmp-gallery", format="png")
    table = gr.Dataframe(label="Results", elem_id="cmp-table", wrap=True)
    with gr.Row():
        lat = gr.BarPlot(x="config", y="latency_s", title="Latency (s, median)", height=220)
        mem = gr.BarPlot(x="config", y="memory_mb", title="Peak memory added (MB)", height=220)
    with gr.Row(equal_height=False):
        choice = gr.Dropdown([], label="Slider: baseline vs", scale=1)
        slider = gr.ImageSlider(label="Baseline | configuration", format="png", type="pil", elem_id="cmp-slider", scale=2)
    images = gr.State({})
    with gr.Row():
        csv_file = gr.File(label="CSV")
        md_file = gr.File(label="Markdown table")
    rows = gr.JSON(label="Rows (as the API returns them)", open=False)
    inputs = [model, custom, device, prompt, seed, steps, guidance, width, height, scheduler, configs, custom_configs,
              warmup, repeats]
    outputs = [gallery, table, lat, mem, choice, slider, images, csv_file, md_file, rows]
    go.click(handlers["compare"], inputs, outputs, api_name="compare", concurrency_id="generation",
             concurrency_limit=generation_concurrency(), show_progress_on=[table])
    choice.change(lambda c, imgs: (imgs["baseline"], imgs[c]) if c in imgs else None, [choice, images], slider,
                  api_visibility="private")


def _ladder_tab(handlers: dict) -> None:
    gr.Markdown("The seed documents' table on this machine: each step adds one technique to the previous ones. "
                "Steps that cannot run here are shown as skipped, with the reason.")
    model, custom, device, prompt, seed, steps, _guidance, width, height = _model_inputs("lad")
    with gr.Row():
        warmup = gr.Number(1, label="Warm-up runs", precision=0)
        repeats = gr.Number(3, label="Timed repeats", precision=0)
    go = gr.Button("Run the ladder", variant="primary", elem_id="ladder-btn")
    md = gr.Markdown(elem_id="ladder-md")
    table = gr.Dataframe(label="Ladder", wrap=True)
    go.click(handlers["ladder"], [model, custom, device, prompt, seed, steps, width, height, warmup, repeats],
             [md, table], api_name="ladder", concurrency_id="generation", concurrency_limit=generation_concurrency())


def _autotune_tab(handlers: dict, generate: dict, tabs: gr.Tabs) -> None:
    gr.Markdown("The fastest configuration whose image stays within a quality floor of the baseline's: each technique "
                "alone, then the survivors combined greedily, then the winner confirmed against the baseline in "
                "interleaved rounds. Every configuration measured is logged as one group.")
    model, custom, device, prompt, seed, steps, _guidance, width, height = _model_inputs("tune")
    names = [t["name"] for t in api.techniques() if t["unavailable"] is None]
    with gr.Row():
        techniques = gr.Dropdown(names, value=[], multiselect=True, label="Techniques to search (empty: all that can help)",
                                 scale=3)
        include_compile = gr.Checkbox(False, label="include torch.compile (minutes per configuration on a CPU)")
    with gr.Row():
        min_psnr = gr.Number(30, label="Min PSNR vs baseline (dB)")
        min_ssim = gr.Number(0.95, label="Min SSIM")
        fidelity_drop = gr.Number(0.03, label="Max prompt-fidelity drop (tiny-shapes)")
        warmup = gr.Number(1, label="Warm-up runs", precision=0)
        repeats = gr.Number(3, label="Timed repeats", precision=0, elem_id="tune-repeats")
        rounds = gr.Number(5, label="Confirmation rounds (A/B)", precision=0, elem_id="tune-rounds")
    with gr.Row():
        go = gr.Button("Auto-tune", variant="primary", elem_id="tune-btn")
        apply = gr.Button("Apply the winner in Generate", interactive=False, elem_id="tune-apply")
    md = gr.Markdown(elem_id="tune-md")
    table = gr.Dataframe(label="Every configuration measured", wrap=True, elem_id="tune-table")
    with gr.Row():
        quality = gr.ScatterPlot(x="latency_s", y="psnr_db", color="front", title="Latency vs PSNR (capped at 100 dB)",
                                 height=240)
        memory = gr.ScatterPlot(x="latency_s", y="peak_memory_mb", color="front", title="Latency vs peak memory",
                                height=240)
    data = gr.JSON(label="Result (as the API returns it)", open=False)
    winner = gr.State([])
    inputs = [model, custom, device, prompt, seed, steps, width, height, techniques, include_compile, min_psnr,
              min_ssim, fidelity_drop, warmup, repeats, rounds]
    go.click(handlers["autotune"], inputs, [md, table, quality, memory, data, winner, apply], api_name="autotune",
             concurrency_id="generation", concurrency_limit=generation_concurrency(), show_progress_on=[table])
    apply.click(handlers["apply_winner"], winner, [generate["inputs"][4], *generate["boxes"], tabs], queue=False,
                api_visibility="private")


def _history_tab(handlers: dict, generate: dict, tabs: gr.Tabs) -> None:
    with gr.Row():
        model = gr.Textbox(label="Model")
        device = gr.Textbox(label="Device")
        status = gr.Dropdown(list(h.STATUSES), value="", label="Status")
        technique = gr.Dropdown(["", *REGISTRY], value="", label="Technique")
        since = gr.Textbox(label="Since (ISO date)", placeholder="2026-11-01")
        limit = gr.Number(200, label="Rows", precision=0, minimum=1, maximum=5000)
    refresh = gr.Button("Refresh", elem_id="history-btn")
    table = gr.Dataframe(label="Runs", wrap=True, max_height=360)
    plot = gr.LinePlot(x="created_at", y="latency_median", color="config_label", title="Latency over time", height=240)
    with gr.Row():
        csv_file = gr.File(label="CSV of these runs")
        db_btn = gr.DownloadButton("Download the database")
        run_id = gr.Number(label="Run id to load into Generate", precision=0)
        load = gr.Button("Load this configuration")
    refresh.click(handlers["history"], [model, device, status, technique, since, limit], [table, plot, csv_file],
                  api_name="history")
    db_btn.click(handlers["export_db"], None, db_btn, api_name="export_db")
    targets = [generate["inputs"][i] for i in (0, 1, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12)]
    load.click(handlers["load_config"], run_id, [*targets, tabs], api_name="load_config").then(
        lambda sel: [n in (sel or []) for n in generate["names"]], generate["inputs"][4], generate["boxes"],
        api_visibility="private")


def _shard_tab(handlers: dict) -> None:
    gr.Markdown("Save a model's components as sharded safetensors (seed: *Working with big models*). The folder is "
                "created under the studio's home, in `sharded/<name>`; load it back by typing its path in Generate's "
                "model field (its parent must be in `STUDIO_MODEL_ROOTS`, which the report says).")
    with gr.Row():
        model = gr.Dropdown(list(SPECS), value=DEFAULT_MODEL, label="Model", allow_custom_value=True)
        custom = gr.Textbox(label="…or a hub id / local directory")
        name = gr.Textbox("tiny-shapes-sharded", label="Folder name", elem_id="shard-name")
        size = gr.Textbox("1MB", label="Max shard size", placeholder="500KB, 1MB, 5GB", elem_id="shard-size")
    go = gr.Button("Save sharded", variant="primary", elem_id="shard-btn")
    table = gr.Dataframe(label="Shards", wrap=True, elem_id="shard-table")
    report = gr.JSON(label="Report (as the API returns it)")
    go.click(handlers["shard"], [model, custom, name, size], [report, table], api_name="shard",
             concurrency_id="generation", concurrency_limit=generation_concurrency())


def build_demo(studio: Studio | None = None) -> gr.Blocks:
    """The whole app around one Studio (a new one on the default database if not given)."""
    studio = studio or Studio()
    handlers = h.build_handlers(studio, api.Cancellations())
    with gr.Blocks(title="Diffusion Studio") as demo:
        gr.Markdown("# Diffusion Studio\nRun diffusers pipelines fast, and measure it honestly.", elem_id="title")
        with gr.Tabs() as tabs:
            with gr.Tab("Generate", id="generate"):
                generate = _generate_tab(handlers)
            with gr.Tab("Compare", id="compare"):
                _compare_tab(handlers)
            with gr.Tab("Ladder", id="ladder"):
                _ladder_tab(handlers)
            with gr.Tab("Auto-tune", id="autotune"):
                _autotune_tab(handlers, generate, tabs)
            with gr.Tab("History", id="history"):
                _history_tab(handlers, generate, tabs)
            with gr.Tab("Big models", id="shard"):
                _shard_tab(handlers)
            with gr.Tab("System", id="system"):
                info = gr.JSON(label="Devices, versions, techniques")
                gr.Button("Refresh", elem_id="system-btn").click(handlers["system"], None, info, api_name="system")
        demo.load(handlers["system"], None, info, api_visibility="private")
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
