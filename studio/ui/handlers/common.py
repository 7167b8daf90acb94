"""What the event handlers share: engine errors as `gr.Error`, the stop check of a run (Cancel button or
a closed client), the session a request belongs to, a form's fields by name into a request, and the Generate
form: its model defaults, technique groups and the values that fill it from a logged run or an image."""

from __future__ import annotations

import functools
import inspect
import json
import logging
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import gradio as gr
from gradio.context import LocalContext

from pipelines.registry import SPECS, resolve
from studio.errors import Cancelled, StudioError, describe
from studio.optimizations import REGISTRY, availability
from studio.request import FIELD_NAMES, REQUEST_FIELDS, GenerationRequest, build_request, pick_fields
from studio.ui.cancel import Cancellations

log = logging.getLogger(__name__)
DEFAULT_MODEL = "tiny-shapes"
GROUPS = ("speed", "memory", "precision")
TECHNIQUE_BOXES = tuple(f"{group}_techniques" for group in GROUPS)  # Generate's boxes, for `optimizations`
# Each group's box, its 'Not available here' fold and the list in it, by name (`techniques_for_model`)
TECHNIQUE_PARTS = (*TECHNIQUE_BOXES, *(f"{g}_fold" for g in GROUPS), *(f"{g}_unavailable" for g in GROUPS))


def _form_order() -> tuple[str, ...]:
    """The request's fields (`studio.request.REQUEST_FIELDS`) as the forms and endpoints name them:
    `custom_model` after `model`, Generate's technique boxes after `optimizations`."""
    names = ["model", "custom_model", *FIELD_NAMES[1:]]
    at = names.index("optimizations") + 1
    return (*names[:at], *TECHNIQUE_BOXES, *names[at:])


FORM_ORDER = _form_order()
# What `form_values` fills, by the form's field names, in its order (Generate's `targets`)
FILLED = tuple(name for name in FORM_ORDER if name not in ("device", "optimizations"))


def in_form_order(fields: dict[str, Any]) -> dict[str, Any]:
    """A form's fields by name (components or values) with the request's first, in `FORM_ORDER` (the
    order of /generate's parameters), then the others as given."""
    return {
        **{name: fields[name] for name in FORM_ORDER if name in fields},
        **{name: value for name, value in fields.items() if name not in FORM_ORDER},
    }


def form_request(fields: dict[str, Any]) -> GenerationRequest:
    """A request from a form's or an endpoint's fields by name (`FORM_ORDER`'s names; others are not the
    request's and are left out): the custom model over the menu's, Generate's ticked boxes as the
    techniques. A field not given takes `build_request`'s default: a sweep's baseline is fp32, with no
    technique and no negative prompt."""
    given = pick_fields(fields)
    given["model"] = model_name(fields.get("model"), fields.get("custom_model", ""))
    if any(box in fields for box in TECHNIQUE_BOXES):
        given["optimizations"] = [name for box in TECHNIQUE_BOXES for name in fields.get(box) or []]
    return build_request(**given)


def engine_errors(fn: Callable) -> Callable:
    """Turn engine errors into gr.Error (the same sentence for browser and client users)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except StudioError as exc:
            raise gr.Error(describe(exc), print_exception=False) from exc
        except Exception as exc:
            log.exception("unexpected error in %s", fn.__name__)
            raise gr.Error(
                f"Internal error ({type(exc).__name__}: {describe(exc)}). See the server log."
            ) from exc

    return wrapper


def optional_fields(fn: Callable) -> Callable:
    """Show the request's fields that default to the model's own (None: steps, guidance, width, height, ...)
    in the signature of a handler that takes the request as `**fields`: Gradio reads a client's defaults from
    the signature where a form field starts empty, so a client may leave them out."""
    signature = inspect.signature(fn)
    own = [p for p in signature.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
    rest = [p for p in signature.parameters.values() if p.kind is inspect.Parameter.VAR_KEYWORD]
    named = {p.name for p in own}
    extra = [
        inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=None)
        for f in REQUEST_FIELDS
        if f.default is None and f.name not in named
    ]
    fn.__signature__ = signature.replace(parameters=[*own, *extra, *rest])
    return fn


def techniques_by_group(device: str, family: str | None = None) -> dict[str, list[dict]]:
    """The techniques that get a box in Generate (not weights precision, which has its own control),
    by group; with `family`, those that cannot run on that kind of model carry the reason."""
    rows = [
        t
        for t in availability(device, family=family)
        if REGISTRY[t["name"]].stage != "load" or t["name"] == "device_map_balanced"
    ]
    return {g: [t for t in rows if t["group"] == g] for g in GROUPS}


def family_of(model: str, custom: str) -> str | None:
    """The family (sd, sdxl, sd3, flux, …) of the model a form names; None while it cannot be resolved."""
    try:
        return resolve(model_name(model, custom)).family
    except StudioError:
        return None


def group_boxes(rows: list[dict]) -> tuple[list[tuple[str, str]], list[dict]]:
    """One group's techniques as the box choices of those that can run, and the rows of those that cannot."""
    choices = [(f"{t['label']} ({t['name']})", t["name"]) for t in rows if t["unavailable"] is None]
    return choices, [t for t in rows if t["unavailable"] is not None]


def unavailable_list(rows: list[dict]) -> str:
    """The techniques of one group that cannot run, each with its reason, as Markdown."""
    return "\n".join(f"- **{t['name']}**: {t['unavailable']}" for t in rows)


def techniques_for_model(model: str, custom: str, *ticked: list[str]) -> dict[str, Any]:
    """Generate's technique boxes for the model now chosen, by name (`TECHNIQUE_PARTS`): each group's
    choices are what can run on it (ticks that still can are kept), and each group's 'Not available' fold
    and list say why the rest cannot."""
    groups = techniques_by_group("auto", family_of(model, custom))
    parts: dict[str, Any] = {}
    for group, kept in zip(GROUPS, ticked, strict=True):
        choices, missing = group_boxes(groups[group])
        names = {name for _, name in choices}
        parts[f"{group}_techniques"] = gr.update(choices=choices, value=[n for n in kept or [] if n in names])
        label = f"Not available here ({len(missing)})"
        parts[f"{group}_fold"] = gr.update(label=label, visible=bool(missing))
        parts[f"{group}_unavailable"] = unavailable_list(missing)
    return parts


def ticked_by_group(optimizations: list[str]) -> list[list[str]]:
    """Which of `optimizations` to tick in each of Generate's technique groups, in the order of GROUPS."""
    groups = techniques_by_group("auto")
    return [[t["name"] for t in groups[g] if t["name"] in optimizations] for g in GROUPS]


def form_values(columns: dict[str, Any]) -> dict[str, Any]:
    """Generate's form by field name (`FILLED`, the tab's `targets`) from run-log columns: a logged run, or
    the settings a PNG carries. A column that is absent (another tool's `parameters` name no techniques)
    leaves its field as it is."""
    keep = gr.update()

    def get(name: str) -> Any:
        return columns[name] if columns.get(name) is not None else keep

    model_id = columns.get("model")
    if model_id is None:
        model, custom = keep, keep
    else:
        model, custom = (model_id, "") if model_id in SPECS else (DEFAULT_MODEL, model_id)
    requested = columns.get("requested")
    boxes = ticked_by_group(requested) if requested is not None else [keep] * len(GROUPS)
    settings = (
        keep if "settings" not in columns else json.dumps(columns["settings"]) if columns["settings"] else ""
    )
    fields = ("prompt", "negative_prompt", "seed", "steps", "guidance", "width", "height", "scheduler")
    sources = [columns.get(c) or "" if c in columns else keep for c in ("vae", "single_file_config")]
    given = columns.get("loras") or ()
    loras = keep if "loras" not in columns else [f"{x['name']}:{x['scale']:g}" for x in given]
    values = (model, custom, get("dtype"), *boxes, *map(get, fields), settings, get("batch"), *sources)
    values += (loras,)
    return dict(zip(FILLED, values, strict=True))


def client_gone_check() -> Callable[[], bool]:
    """A check, for the running event, that its client is still listening.

    When a browser tab or a `gradio_client` closes its stream, Gradio marks the queued event
    not alive (`Queue.clean_events`) but cannot stop a function already running in a thread;
    the engine asks this between denoising steps and stops the run. Call it in the handler's
    thread (it reads the event from Gradio's context).
    """
    blocks, event_id = LocalContext.blocks.get(None), LocalContext.event_id.get(None)
    queue = getattr(blocks, "_queue", None)
    if queue is None or event_id is None:
        return lambda: False

    def gone() -> bool:
        for job in queue.active_jobs:
            for event in job or ():
                if event._id == event_id:
                    return not event.alive
        return False

    return gone


def session_of(request: gr.Request | None) -> str:
    """The session a request belongs to ("api" for a client without one)."""
    return request.session_hash if request and request.session_hash else "api"


NOTHING_RUNNING = "Nothing is running."  # a Cancel's answer when the session has no run to stop


def cancellable_run(
    cancels: Cancellations, request: gr.Request | None, job: str
) -> AbstractContextManager[Callable[[], str | None]]:
    """A new `job` run of the request's session, for the length of a `with` block; yields its stop check: the
    job's Cancel button, or its client gone."""
    return cancels.running(session_of(request), job, client_gone=client_gone_check())


def cancel_controls(cancels: Cancellations, job: str, stopping: str) -> dict[str, Callable]:
    """`{job}_reserve`, for the click of the job's Run button (its flag made before the run leaves the queue),
    and `{job}_cancel`, for its Cancel: stops the session's `job` run, and one that waits, answering
    `stopping`, or that nothing is running."""

    def reserve(request: gr.Request) -> None:
        cancels.reserve(session_of(request), job)

    def cancel(request: gr.Request) -> str:
        return stopping if cancels.cancel(session_of(request), job) else NOTHING_RUNNING

    return {f"{job}_reserve": reserve, f"{job}_cancel": cancel}


def model_name(model: Any, custom: Any) -> Any:
    """The model a form names: the custom hub id or directory when given, else the dropdown's (what is
    not text is left for the request's check to refuse)."""
    return (custom.strip() if isinstance(custom, str) else custom) or model


def model_defaults(model: str, custom: str) -> dict[str, Any]:
    """A model's own steps, guidance, size and example prompt by field name, for the form when the model
    changes; nothing (the form left as it is) while the model cannot be resolved."""
    try:
        spec = resolve(model_name(model, custom))
    except StudioError:
        return {}
    numbers = {"steps": spec.steps, "guidance": spec.guidance, "width": spec.width, "height": spec.height}
    return {**numbers, "prompt": spec.example_prompt}


def model_numbers(model: str, custom: str) -> dict[str, Any]:
    """A model's own steps, guidance and size by field name: what the form shows when the page loads."""
    return {name: value for name, value in model_defaults(model, custom).items() if name != "prompt"}


def cancelled_note(exc: Cancelled) -> str:
    """The neutral note a cancelled run shows instead of an error."""
    return f"{describe(exc)} The run is logged as cancelled."
