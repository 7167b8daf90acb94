"""The studio as an MCP server: five typed tools for agents, on Gradio's own MCP support.

Gradio builds each tool's schema from the function's type hints and its description from the docstring
(the text before `Args:`, and each `Args:` line for its parameter). The tools go through the same boundary
and engine as the form endpoints (`studio.request`, `Studio`, the sweeps): an argument that is a request field
has the field's name (`studio.request.REQUEST_FIELDS`) and reaches `build_request` by it. They answer the
records of `python -m studio generate|compare|autotune|history --json` (`/system`'s for `system`), `generate`
also the image: as JSON text, image content and a URL to an agent; as objects and a downloaded PNG to a
`gradio_client` user of the endpoints `/mcp_generate`, ... An engine error reaches the agent as its sentence,
and so does a bad argument: the tools check their arguments themselves, as the forms do (the MCP server does
not check them against the schema first: `studio.ui.mcp_server.ArgumentsCheckedByTheStudio`).
Gradio serves every public endpoint as a tool: `studio.ui.mcp_server.hide_form_endpoints` keeps the form
endpoints (`/generate`, ...) out of the tool list and the schema, not out of the API. `STUDIO_MCP=0` turns the
MCP server off.
"""

import json
import os
from typing import Any, Literal

import gradio as gr
from gradio import processing_utils, utils
from PIL import Image

from studio import report
from studio.engine import Studio
from studio.errors import ValidationError
from studio.request import AutotuneSettings, HistoryFilter, build_request, pick_fields, validate_counts
from studio.request.axes import parse_axes
from studio.sweeps import autotune as autotune_mod
from studio.sweeps import xy
from studio.sweeps.compare import DEFAULT_ROUNDS, run_compare
from studio.ui import views
from studio.ui.cancel import Cancellations
from studio.ui.handlers.common import DEFAULT_MODEL, cancellable_run, engine_errors
from studio.ui.mcp_server import json_text
from studio.ui.visiting import visiting_all

TOOLS = ("generate", "compare", "autotune", "history", "system")
Record = dict[str, Any]


def mcp_enabled() -> bool:
    """Whether the app also serves MCP (`STUDIO_MCP`, on unless 0, false, no or off)."""
    return os.environ.get("STUDIO_MCP", "1").strip().lower() not in ("0", "false", "no", "off")


def _plain(data: Any) -> Any:
    """An answer as plain JSON values (what `gradio_client` receives; paths and dates as strings)."""
    return json.loads(json_text(data))


def _png(image: Image.Image) -> gr.FileData:
    """The image as a PNG in Gradio's cache (an agent gets image content and a URL, a client the file)."""
    path = processing_utils.save_pil_to_cache(image, utils.get_upload_folder(), format="png")
    return gr.FileData(path=path)


def _texts(value: Any, name: str, example: str) -> list[str]:
    """A tool's list argument (the MCP schema is not checked before the tool runs: the tool's sentence is the
    answer), or a ValidationError saying the form it takes."""
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValidationError(f"{name} must be a list of text, e.g. {example}, not {value!r}.")
    return value


def build_mcp_tools(studio: Studio) -> dict[str, Any]:
    """The tool functions by name, closed over one Studio."""
    cancels = Cancellations()

    @engine_errors
    def generate(
        prompt: str,
        model: str = DEFAULT_MODEL,
        optimizations: list[str] | None = None,
        precision: Literal["fp32", "bf16", "fp16"] = "fp32",
        device: str = "auto",
        seed: int = 0,
        steps: int | None = None,
        guidance: float | None = None,
        width: int | None = None,
        height: int | None = None,
        negative_prompt: str = "",
        scheduler: str | None = None,
        settings: dict[str, dict[str, Any]] | None = None,
        warmup: int = 0,
        rounds: int = 1,
        batch: int = 1,
        loras: list[str] | None = None,
        request: gr.Request | None = None,
    ) -> tuple[Record, gr.FileData]:
        """Generate one image with a diffusers pipeline in the given configuration; the run is timed and
        logged. Returns the run as JSON (run_id, config, applied techniques, latency_s, peak memory and the
        other figures of the run, prompt_score (how well the image shows the prompt: CLIP score, or the
        bundled model's own judge; prompt_score_note says why there is none), plus warnings), then the image
        itself (PNG) and its URL on this server (a batch: side by side). Call `system` for the techniques
        this machine can run.

        Args:
            prompt: What to draw, e.g. "a big red circle on the left".
            model: tiny-shapes (bundled, fast on a CPU), sd15, sdxl, sd-turbo, a hub id or a local folder.
            optimizations: Technique names to apply, e.g. ["sdpa", "channels_last"]; empty for the baseline.
            precision: Weights precision; bf16 and fp16 are techniques like the others.
            device: "auto", "cpu", "cuda", "cuda:1" or "mps".
            seed: Random seed (-1 for a random one).
            steps: Denoising steps (1-200); empty for the model's default.
            guidance: Classifier-free guidance scale (0-30); empty for the model's default.
            width: Image width in pixels, a multiple of 8; empty for the model's default.
            height: Image height in pixels, a multiple of 8; empty for the model's default.
            negative_prompt: What not to draw.
            scheduler: A scheduler name such as "ddim" or "euler"; empty for the model's own.
            settings: Technique settings, e.g. {"deepcache": {"interval": 2}}.
            warmup: Untimed calls before the timed ones (compile and trace time shows here).
            rounds: Timed calls; latency_s is their median.
            batch: Images per prompt in one call (1-8); seconds_per_image and images_per_s report it.
            loras: LoRAs, each "SOURCE" or "SOURCE:SCALE" (e.g. ["night:0.5"]): a name the `loras` listing
                shows, a .safetensors file or a hub id; <lora:NAME:SCALE> in the prompt does the same.
        """
        req = build_request(**pick_fields(locals()))  # first, while locals() are only the arguments
        counts = validate_counts(warmup, rounds)
        with cancellable_run(cancels, request, "generate") as should_stop:
            result = studio.generate(req, warmup=counts.warmup, rounds=counts.rounds, should_stop=should_stop)
        record = {**report.single_record(result), "warnings": list(result.warnings)}
        return _plain(record), _png(views.batch_image(result.images))

    @engine_errors
    def compare(
        prompt: str,
        configs: list[str],
        model: str = DEFAULT_MODEL,
        device: str = "auto",
        seed: int = 0,
        steps: int | None = None,
        guidance: float | None = None,
        width: int | None = None,
        height: int | None = None,
        scheduler: str | None = None,
        warmup: int = 1,
        rounds: int = DEFAULT_ROUNDS,
        batch: int = 1,
        axis: str | None = None,
        axis_values: str = "",
        y_axis: str | None = None,
        y_values: str = "",
        loras: list[str] | None = None,
        request: gr.Request | None = None,
    ) -> Record:
        """Compare configurations side by side against the fp32 baseline, in interleaved timed rounds.
        Returns JSON: group_id and one row per configuration (baseline first) with latency_s, speedup and
        its min-max range over rounds, peak memory, how much the image changed (psnr, ssim) and whether it
        still shows the prompt (prompt_score, prompt_score_change against the baseline's, in points).

        Args:
            prompt: What to draw (the same for every configuration).
            configs: Configurations besides the baseline, e.g. ["bf16+channels_last", "deepcache[interval=2]"]
            model: A registry model (tiny-shapes, sd15, sdxl, ...), a hub id or a local folder.
            device: "auto", "cpu", "cuda", "cuda:1" or "mps".
            seed: Random seed.
            steps: Denoising steps; empty for the model's default.
            guidance: Classifier-free guidance scale; empty for the model's default.
            width: Image width, a multiple of 8; empty for the model's default.
            height: Image height, a multiple of 8; empty for the model's default.
            scheduler: A scheduler name; empty for the model's own.
            warmup: Untimed calls per configuration before the rounds.
            rounds: Timed rounds; each runs every configuration once.
            batch: Images per prompt in one call (1-8).
            axis: Optional X axis: steps, size, scheduler, batch, seed, prompt, lora or a setting
                (deepcache.interval).
            axis_values: The axis values, e.g. "1,2,4,8" ("auto" for batch, "+4" for 4 seeds; for prompt,
                the first value is searched in the prompt and each value replaces it); rows then carry x.
            y_axis: Optional Y axis, of the same kinds as the X axis: a grid of X x Y per configuration.
            y_values: The Y axis values; rows then carry y too.
            loras: LoRAs for every configuration, each "SOURCE" or "SOURCE:SCALE" (e.g. ["night:0.5"]).
        """
        req = build_request(**pick_fields(locals()))  # as in generate; the baseline: fp32, no technique
        configs = _texts(configs, "configs", '["channels_last", "deepcache[interval=2]"]')
        counts = validate_counts(warmup, rounds)
        x_axis, y = parse_axes(axis, axis_values, y_axis, y_values, req)
        with cancellable_run(cancels, request, "compare") as should_stop:
            options = {"warmup": counts.warmup, "rounds": counts.rounds, "should_stop": should_stop}
            if x_axis is not None:
                return _plain(xy.as_json(xy.run_xy(studio, req, configs, x_axis, y, **options)))
            result = run_compare(studio, req, configs, **options)
        return _plain({"group_id": result.group_id, "rows": result.records})

    @engine_errors
    def autotune(
        prompt: str,
        model: str = DEFAULT_MODEL,
        device: str = "auto",
        seed: int = 0,
        steps: int | None = None,
        width: int | None = None,
        height: int | None = None,
        techniques: list[str] | None = None,
        include_compile: bool = False,
        min_psnr: float = 30.0,
        min_ssim: float = 0.95,
        fidelity_drop: float = 0.03,
        warmup: int = 1,
        rounds: int = 3,
        confirm_rounds: int = 5,
        request: gr.Request | None = None,
    ) -> Record:
        """Search for the fastest configuration whose image stays within a quality floor of the baseline,
        then confirm it in interleaved rounds. Returns JSON: winner (techniques and settings, or null),
        winner_label, summary, confirmation and every configuration measured. Minutes on a CPU.

        Args:
            prompt: What to draw.
            model: A registry model (tiny-shapes, sd15, sdxl, ...), a hub id or a local folder.
            device: "auto", "cpu", "cuda", "cuda:1" or "mps".
            seed: Random seed.
            steps: Denoising steps; empty for the model's default.
            width: Image width, a multiple of 8; empty for the model's default.
            height: Image height, a multiple of 8; empty for the model's default.
            techniques: Limit the search to these technique names; empty for all that can help here.
            include_compile: Also try torch_compile (slow to prepare).
            min_psnr: Quality floor: PSNR against the baseline image, in dB.
            min_ssim: Quality floor: SSIM against the baseline image.
            fidelity_drop: tiny-shapes only: the largest prompt-fidelity loss allowed.
            warmup: Untimed calls per configuration.
            rounds: Timed calls per configuration in the search.
            confirm_rounds: Interleaved baseline/winner rounds that confirm the winner.
        """
        req = build_request(**pick_fields(locals()))  # as in generate; the baseline: fp32, no technique
        techniques = _texts(techniques, "techniques", '["deepcache", "cfg_cutoff"]') or None
        settings = AutotuneSettings.of(locals())
        with cancellable_run(cancels, request, "autotune") as should_stop:
            result = autotune_mod.run_with(studio, req, settings, should_stop=should_stop)
        return _plain(autotune_mod.as_json(result))

    @engine_errors
    def history(
        model: str | None = None,
        device: str | None = None,
        status: str | None = None,
        technique: str | None = None,
        since: str | None = None,
        until: str | None = None,
        limit: int = 20,
    ) -> list[Record]:
        """Runs from the studio's run log, newest first (every run of every face: UI, API, CLI, MCP).
        Returns a JSON list of runs: run_id, created_at, model, config, status, latency_s, memory and
        quality figures, prompt, seed and settings.

        Args:
            model: Only runs of this model id.
            device: Only runs on this device, e.g. "cpu" or "cuda:0".
            status: Only runs with this status: running, ok, failed, cancelled or interrupted.
            technique: Only runs that requested this technique.
            since: Only runs from this date or time on (ISO 8601, e.g. "2026-01-31").
            until: Only runs up to this date or time (ISO 8601).
            limit: The most runs to return.
        """
        return _plain([report.log_record(r) for r in studio.history(HistoryFilter.of(locals()))])

    @engine_errors
    def system() -> Record:
        """What this machine can run: hardware and devices, library versions, every technique with whether
        it is available here (and why not), the pipelines loaded, and the run log's path. Returns JSON."""
        return _plain(studio.system_facts())

    return dict(zip(TOOLS, (generate, compare, autotune, history, system), strict=True))


def register_mcp_tools(studio: Studio) -> dict[str, Any]:
    """Add the tools to the Blocks being built, as `/mcp_generate`, `/mcp_compare`, ... Call it before the
    tabs: a tool takes its function's name (`generate`, ...) only where no earlier endpoint has it. Queued,
    like the forms: the queue's bounds apply, an error is the plain sentence (the unqueued path quotes it)."""
    tools = visiting_all(build_mcp_tools(studio))
    for name, fn in tools.items():
        gr.api(fn, api_name=f"mcp_{name}")
    return tools
