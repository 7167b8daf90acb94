"""The studio as an MCP server: five typed tools for agents, on Gradio's own MCP support.

Gradio builds each tool's schema from the function's signature and type hints and its description from the
docstring (the text before `Args:`, and each `Args:` line for its parameter). A tool's parameters are listed
once, in its order: a request field by its name, whose type, default and documentation are the field's
(`studio.request.REQUEST_FIELDS`; a tool's model defaults to the bundled one), and the tool's own parameters
(`Param`: compare's configurations and axes, autotune's floor and counts, history's filters) where the tool
is. `as_tool` makes the function Gradio serves from a handler (a plain function below, `def generate(`)
and that list: its signature, type hints and `Args:` lines. The tools go through the same boundary and
engine as the form endpoints (`studio.request`, `Studio`, the sweeps): a request field reaches
`build_request` by its name. They answer the records of `python -m studio generate|compare|autotune|history
--json` (`/system`'s for `system`), `generate` also the image: as JSON text, image content and a URL to an
agent; as objects and a downloaded PNG to a `gradio_client` user of the endpoints `/mcp_generate`, ... An
engine error reaches the agent as its sentence, and so does a bad argument: the tools check their arguments
themselves, as the forms do (the MCP server does not check them against the schema first:
`studio.ui.mcp_server.ArgumentsCheckedByTheStudio`).
Gradio serves every public endpoint as a tool: `studio.ui.mcp_server.hide_form_endpoints` keeps the form
endpoints (`/generate`, ...) out of the tool list and the schema, not out of the API. `STUDIO_MCP=0` turns the
MCP server off.
"""

import inspect
import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import gradio as gr
from gradio import processing_utils, utils
from PIL import Image

from studio import report
from studio.engine import Studio
from studio.errors import ValidationError
from studio.request import AutotuneSettings, HistoryFilter, build_request, pick_fields, validate_counts
from studio.request.axes import parse_axes
from studio.request.fields import REQUEST_FIELDS, REQUIRED
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


@dataclass(frozen=True)
class Param:
    """A tool's parameter as Gradio reads it: its name, type, default (`REQUIRED` for none) and the one line
    of documentation the tool's schema shows for it."""

    name: str
    annotation: Any
    default: Any
    doc: str


TUNED = AutotuneSettings()  # the auto-tuner's defaults, which autotune's parameters show
FLOOR = TUNED.floor
TOOL_DEFAULTS = {"model": DEFAULT_MODEL}  # an agent may leave the model out: the bundled one
# The request's fields as the tools' parameters: the table's types, defaults and documentation
FIELDS = {
    f.name: Param(f.name, f.annotation, TOOL_DEFAULTS.get(f.name, f.default), f.doc) for f in REQUEST_FIELDS
}

GENERATE = (
    *("prompt", "model", "optimizations", "precision", "device", "seed", "steps", "guidance", "width"),
    *("height", "negative_prompt", "scheduler", "settings"),
    Param("warmup", int, 0, "Untimed calls before the timed ones (compile and trace time shows here)."),
    Param("rounds", int, 1, "Timed calls; latency_s is their median."),
    *("batch", "loras"),
)
COMPARE = (
    "prompt",
    Param(
        "configs",
        list[str],
        REQUIRED,
        'Configurations besides the baseline, e.g. ["bf16+channels_last", "deepcache[interval=2]"].',
    ),
    *("model", "device", "seed", "steps", "guidance", "width", "height", "scheduler"),
    Param("warmup", int, 1, "Untimed calls per configuration before the rounds."),
    Param("rounds", int, DEFAULT_ROUNDS, "Timed rounds; each runs every configuration once."),
    "batch",
    Param(
        "axis",
        str | None,
        None,
        "Optional X axis: steps, size, scheduler, batch, seed, prompt, lora or a setting "
        "(deepcache.interval).",
    ),
    Param(
        "axis_values",
        str,
        "",
        'The axis values, e.g. "1,2,4,8" ("auto" for batch, "+4" for 4 seeds; for prompt, the first value is '
        "searched in the prompt and each value replaces it); rows then carry x.",
    ),
    Param(
        "y_axis",
        str | None,
        None,
        "Optional Y axis, of the same kinds as the X axis: a grid of X x Y per configuration.",
    ),
    Param("y_values", str, "", "The Y axis values; rows then carry y too."),
    "loras",
)
AUTOTUNE = (
    *("prompt", "model", "device", "seed", "steps", "width", "height"),
    Param(
        "techniques",
        list[str] | None,
        None,
        "Limit the search to these technique names; empty for all that can help here.",
    ),
    Param("include_compile", bool, False, "Also try torch_compile (slow to prepare)."),
    Param("min_psnr", float, FLOOR.min_psnr, "Quality floor: PSNR against the baseline image, in dB."),
    Param("min_ssim", float, FLOOR.min_ssim, "Quality floor: SSIM against the baseline image."),
    Param(
        "fidelity_drop",
        float,
        FLOOR.fidelity_drop,
        "tiny-shapes only: the largest prompt-fidelity loss allowed.",
    ),
    Param("warmup", int, TUNED.warmup, "Untimed calls per configuration."),
    Param("rounds", int, TUNED.rounds, "Timed calls per configuration in the search."),
    Param(
        "confirm_rounds",
        int,
        TUNED.confirm_rounds,
        "Interleaved baseline/winner rounds that confirm the winner.",
    ),
)
HISTORY = (
    Param("model", str | None, None, "Only runs of this model id."),
    Param("device", str | None, None, 'Only runs on this device, e.g. "cpu" or "cuda:0".'),
    Param(
        "status",
        str | None,
        None,
        "Only runs with this status: running, ok, failed, cancelled or interrupted.",
    ),
    Param("technique", str | None, None, "Only runs that requested this technique."),
    Param("since", str | None, None, 'Only runs from this date or time on (ISO 8601, e.g. "2026-01-31").'),
    Param("until", str | None, None, "Only runs up to this date or time (ISO 8601)."),
    Param("limit", int, 20, "The most runs to return."),
)


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


@engine_errors
def generate(
    studio: Studio, cancels: Cancellations, request: gr.Request | None, **arguments: Any
) -> tuple[Record, gr.FileData]:
    """Generate one image with a diffusers pipeline in the given configuration; the run is timed and
    logged. Returns the run as JSON (run_id, config, applied techniques, latency_s, peak memory and the
    other figures of the run, prompt_score (how well the image shows the prompt: CLIP score, or the
    bundled model's own judge; prompt_score_note says why there is none), plus warnings), then the image
    itself (PNG) and its URL on this server (a batch: side by side). Call `system` for the techniques
    this machine can run."""
    req = build_request(**pick_fields(arguments))
    counts = validate_counts(arguments["warmup"], arguments["rounds"])
    with cancellable_run(cancels, request, "generate") as should_stop:
        result = studio.generate(req, warmup=counts.warmup, rounds=counts.rounds, should_stop=should_stop)
    record = {**report.single_record(result), "warnings": list(result.warnings)}
    return _plain(record), _png(views.batch_image(result.images))


@engine_errors
def compare(studio: Studio, cancels: Cancellations, request: gr.Request | None, **arguments: Any) -> Record:
    """Compare configurations side by side against the fp32 baseline, in interleaved timed rounds.
    Returns JSON: group_id and one row per configuration (baseline first) with latency_s, speedup and
    its min-max range over rounds, peak memory, how much the image changed (psnr, ssim) and whether it
    still shows the prompt (prompt_score, prompt_score_change against the baseline's, in points)."""
    req = build_request(**pick_fields(arguments))  # the baseline: fp32, no technique
    configs = _texts(arguments["configs"], "configs", '["channels_last", "deepcache[interval=2]"]')
    counts = validate_counts(arguments["warmup"], arguments["rounds"])
    x_axis, y = parse_axes(
        arguments["axis"], arguments["axis_values"], arguments["y_axis"], arguments["y_values"], req
    )
    with cancellable_run(cancels, request, "compare") as should_stop:
        options = {"warmup": counts.warmup, "rounds": counts.rounds, "should_stop": should_stop}
        if x_axis is not None:
            return _plain(xy.as_json(xy.run_xy(studio, req, configs, x_axis, y, **options)))
        result = run_compare(studio, req, configs, **options)
    return _plain({"group_id": result.group_id, "rows": result.records})


@engine_errors
def autotune(studio: Studio, cancels: Cancellations, request: gr.Request | None, **arguments: Any) -> Record:
    """Search for the fastest configuration whose image stays within a quality floor of the baseline,
    then confirm it in interleaved rounds. Returns JSON: winner (techniques and settings, or null),
    winner_label, summary, confirmation and every configuration measured. Minutes on a CPU."""
    req = build_request(**pick_fields(arguments))  # the baseline: fp32, no technique
    techniques = _texts(arguments["techniques"], "techniques", '["deepcache", "cfg_cutoff"]') or None
    settings = AutotuneSettings.of({**arguments, "techniques": techniques})
    with cancellable_run(cancels, request, "autotune") as should_stop:
        result = autotune_mod.run_with(studio, req, settings, should_stop=should_stop)
    return _plain(autotune_mod.as_json(result))


@engine_errors
def history(studio: Studio, **filters: Any) -> list[Record]:
    """Runs from the studio's run log, newest first (every run of every face: UI, API, CLI, MCP).
    Returns a JSON list of runs: run_id, created_at, model, config, status, latency_s, memory and
    quality figures, prompt, seed and settings."""
    return _plain([report.log_record(r) for r in studio.history(HistoryFilter.of(filters))])


@engine_errors
def system(studio: Studio) -> Record:
    """What this machine can run: hardware and devices, library versions, every technique with whether
    it is available here (and why not), the pipelines loaded, and the run log's path. Returns JSON."""
    return _plain(studio.system_facts())


def tool_params(listed: Sequence[str | Param]) -> list[Param]:
    """A tool's parameters in its order: each request field named by `listed` as `FIELDS` has it, the
    tool's own as given."""
    return [FIELDS[p] if isinstance(p, str) else p for p in listed]


def as_tool(handler: Callable, listed: Sequence[str | Param], *context: Any) -> Callable:
    """`handler` as the function Gradio serves as a tool: its signature and type hints are `listed`'s
    parameters (`tool_params`), then the handler's `request` where it takes one (Gradio hands it the
    `gr.Request`); its docstring is the handler's with an `Args:` line per parameter; its name is the
    handler's (the tool's). A call runs `handler(*context, request=..., **arguments)`, every argument
    given or defaulted, by name."""
    params = tool_params(listed)
    if "request" in inspect.signature(handler).parameters:
        params.append(Param("request", gr.Request | None, None, ""))
    signature = inspect.Signature(
        [
            inspect.Parameter(
                p.name,
                inspect.Parameter.POSITIONAL_OR_KEYWORD,
                annotation=p.annotation,
                **({} if p.default is REQUIRED else {"default": p.default}),
            )
            for p in params
        ],
        return_annotation=inspect.signature(handler).return_annotation,
    )

    def tool(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        return handler(*context, **bound.arguments)

    lines = [f"    {p.name}: {p.doc}" for p in params if p.doc]
    tool.__name__ = tool.__qualname__ = handler.__name__
    tool.__doc__ = "\n".join([inspect.getdoc(handler) or "", *(["", "Args:", *lines] if lines else [])])
    tool.__signature__ = signature
    tool.__annotations__ = {p.name: p.annotation for p in params} | {"return": signature.return_annotation}
    return tool


def build_mcp_tools(studio: Studio) -> dict[str, Any]:
    """The tool functions by name, over one Studio; a closed client stops its run (`cancels`)."""
    cancels = Cancellations()
    return {
        "generate": as_tool(generate, GENERATE, studio, cancels),
        "compare": as_tool(compare, COMPARE, studio, cancels),
        "autotune": as_tool(autotune, AUTOTUNE, studio, cancels),
        "history": as_tool(history, HISTORY, studio),
        "system": as_tool(system, (), studio),
    }


def register_mcp_tools(studio: Studio) -> dict[str, Any]:
    """Add the tools to the Blocks being built, as `/mcp_generate`, `/mcp_compare`, ... Call it before the
    tabs: a tool takes its function's name (`generate`, ...) only where no earlier endpoint has it. Queued,
    like the forms: the queue's bounds apply, an error is the plain sentence (the unqueued path quotes it)."""
    tools = visiting_all(build_mcp_tools(studio))
    for name, fn in tools.items():
        gr.api(fn, api_name=f"mcp_{name}")
    return tools
