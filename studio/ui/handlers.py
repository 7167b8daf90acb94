"""Event handlers of the Gradio app (the ui package is the only importer of gradio).

Every engine error reaches browser and client users as `gr.Error` with the engine's sentence; a
cancelled run is not an error: it comes back as a neutral "Cancelled after step N" note.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Callable

import gradio as gr
import pandas as pd
from gradio.context import LocalContext

from pipelines.registry import SPECS, resolve
from studio import report
from studio import settings as studio_settings
from studio.engine import Studio
from studio.errors import Cancelled, OutOfMemory, StudioError, describe
from studio.optimizations import REGISTRY
from studio.request import (
    PRECISIONS,
    build_request,
    parse_opts,
    validate_autotune,
    validate_counts,
    validate_history,
    validate_run_id,
    validate_shard_target,
)
from studio.scale.shard import shard_model
from studio.sweeps import ladder as ladder_mod
from studio.sweeps.autotune import floor_of, run_autotune
from studio.sweeps.compare import run_compare
from studio.ui import exports, views
from studio.ui.cancel import Cancellations

log = logging.getLogger(__name__)
DEFAULT_MODEL = "tiny-shapes"
GROUPS = ("speed", "memory", "precision")
PRESETS = (
    "bf16",
    "channels_last",
    "bf16,channels_last",
    "classic_attention",
    "attention_slicing",
    "autocast",
    "jit_trace_unet",
    "bf16,channels_last,jit_trace_unet",
    "vae_slicing",
    "vae_tiling",
    "torch_compile",
)
STATUSES = ("", "ok", "failed", "cancelled", "interrupted", "running")


def _engine_errors(fn: Callable) -> Callable:
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


def techniques_by_group(device: str) -> dict[str, list[dict]]:
    """The techniques that get a box in Generate (not weights precision, which has its own control),
    by group."""
    rows = [
        t
        for t in report.availability(device)
        if REGISTRY[t["name"]].stage != "load" or t["name"] == "device_map_balanced"
    ]
    return {g: [t for t in rows if t["group"] == g] for g in GROUPS}


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


def _session(request: gr.Request | None) -> str:
    return request.session_hash if request and request.session_hash else "api"


def _model_name(model: str, custom: str) -> str:
    return (custom or "").strip() or model


def model_defaults(model: str, custom: str):
    try:
        spec = resolve(_model_name(model, custom))
    except StudioError:
        return [gr.update()] * 5
    return spec.steps, spec.guidance, spec.width, spec.height, spec.example_prompt


def _cancelled(exc: Cancelled) -> str:
    return f"{describe(exc)} The run is logged as cancelled."


def build_handlers(studio: Studio, cancels: Cancellations) -> dict[str, Callable]:
    """The event functions, closed over one Studio."""
    memory_advice: dict[str, tuple[str, ...]] = {}  # per session: what to retry with after an out-of-memory

    def stop_check(request: gr.Request | None):
        return cancels.begin(_session(request), client_gone=client_gone_check())

    def run_generate(req, request: gr.Request | None, progress: gr.Progress):
        progress(0, desc="loading / configuring")
        memory_advice.pop(_session(request), None)
        try:
            result = studio.generate(
                req,
                on_step=lambda i, n: progress((i, n), desc="denoising", unit="steps"),
                should_stop=stop_check(request),
            )
        except OutOfMemory as exc:
            memory_advice[_session(request)] = exc.advice[:2]
            raise
        except Cancelled as exc:
            return gr.update(), _cancelled(exc), None
        for warning in result.warnings:
            gr.Warning(warning)
        metrics = report.single_record(result)
        return result.images[0], views.generate_card(metrics), metrics

    @_engine_errors
    def generate(
        model,
        custom_model,
        device,
        precision,
        optimizations,
        prompt,
        negative_prompt,
        seed,
        steps,
        guidance,
        width,
        height,
        scheduler,
        settings,
        request: gr.Request,
        progress=gr.Progress(),
    ):
        req = build_request(
            _model_name(model, custom_model),
            device,
            precision,
            optimizations,
            prompt,
            negative_prompt,
            seed,
            steps,
            guidance,
            width,
            height,
            scheduler,
            settings,
        )
        return run_generate(req, request, progress)

    @_engine_errors
    def generate_form(
        model,
        custom_model,
        device,
        precision,
        speed,
        memory,
        precision_opts,
        prompt,
        negative_prompt,
        seed,
        steps,
        guidance,
        width,
        height,
        scheduler,
        settings,
        request: gr.Request,
        progress=gr.Progress(),
    ):
        """The form's own Generate: the ticked boxes are this event's inputs, read when it is clicked."""
        opts = [*(speed or []), *(memory or []), *(precision_opts or [])]
        req = build_request(
            _model_name(model, custom_model),
            device,
            precision,
            opts,
            prompt,
            negative_prompt,
            seed,
            steps,
            guidance,
            width,
            height,
            scheduler,
            settings,
        )
        return run_generate(req, request, progress)

    def retry_offer(request: gr.Request):
        """After a failed generate: a 'Retry with …' button when it ran out of memory."""
        advice = memory_advice.pop(_session(request), ())
        if not advice:
            return gr.update(visible=False), []
        return gr.update(visible=True, value=f"Retry with {' + '.join(advice)}"), list(advice)

    def apply_advice(advice, memory):
        """Tick the advised memory techniques in Generate's memory group."""
        return gr.update(visible=False), [*(memory or []), *(a for a in advice if a not in (memory or []))]

    def cancel(request: gr.Request):
        stopping = cancels.cancel(_session(request))
        return "Stopping after the current step…" if stopping else "Nothing is running."

    @_engine_errors
    def compare(
        model,
        custom_model,
        device,
        prompt,
        seed,
        steps,
        guidance,
        width,
        height,
        scheduler,
        presets,
        custom_configs,
        warmup,
        rounds,
        request: gr.Request,
        progress=gr.Progress(),
    ):
        req = build_request(
            _model_name(model, custom_model),
            device,
            "fp32",
            [],
            prompt,
            "",
            seed,
            steps,
            guidance,
            width,
            height,
            scheduler,
        )
        configs = list(presets or []) + [c.strip() for c in (custom_configs or "").splitlines() if c.strip()]
        counts = validate_counts(warmup, rounds)
        try:
            result = run_compare(
                studio,
                req,
                configs,
                warmup=counts.warmup,
                rounds=counts.rounds,
                progress=lambda i, n, label: progress((i, n), desc=label),
                should_stop=stop_check(request),
            )
        except Cancelled as exc:
            return views.compare_cancelled(_cancelled(exc))
        return views.compare_outputs(result)

    @_engine_errors
    def run_ladder(
        model,
        custom_model,
        device,
        prompt,
        seed,
        steps,
        width,
        height,
        warmup,
        rounds,
        request: gr.Request,
        progress=gr.Progress(),
    ):
        req = build_request(
            _model_name(model, custom_model),
            device,
            "fp32",
            [],
            prompt,
            "",
            seed,
            steps,
            None,
            width,
            height,
            None,
        )
        counts = validate_counts(warmup, rounds)
        try:
            _, records = ladder_mod.run_ladder(
                studio,
                req,
                warmup=counts.warmup,
                rounds=counts.rounds,
                progress=lambda i, n, s: progress((i, n), desc=s),
                should_stop=stop_check(request),
            )
        except Cancelled as exc:
            return gr.update(visible=True), _cancelled(exc), None, None
        table = pd.DataFrame(report.readable_rows(records, ladder_mod.STEP_COLUMN))
        return gr.update(visible=True), views.headline(records), table, records

    @_engine_errors
    def autotune(
        model,
        custom_model,
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
        confirm_rounds,
        request: gr.Request,
        progress=gr.Progress(),
    ):
        req = build_request(
            _model_name(model, custom_model),
            device,
            "fp32",
            [],
            prompt,
            "",
            seed,
            steps,
            None,
            width,
            height,
            None,
        )
        checked = validate_autotune(min_psnr, min_ssim, fidelity_drop, warmup, rounds, confirm_rounds)
        try:
            result = run_autotune(
                studio,
                req,
                floor=floor_of(checked),
                techniques=parse_opts(techniques) or None,
                include_compile=bool(include_compile),
                warmup=checked.warmup,
                repeats=checked.repeats,
                confirm_rounds=checked.confirm_rounds,
                should_stop=stop_check(request),
                progress=lambda i, n, s: progress((i, n), desc=s),
            )
        except Cancelled as exc:
            return views.autotune_cancelled(_cancelled(exc))
        return views.autotune_outputs(result)

    def apply_winner(winner):
        """The whole winner in Generate: precision, techniques by group and their settings; Generate shown."""
        winner = winner or {}
        opts = winner.get("techniques", [])
        precision = next((o for o in opts if o in PRECISIONS), "fp32")
        groups = techniques_by_group("auto")
        ticked = [[t["name"] for t in groups[g] if t["name"] in opts] for g in GROUPS]
        settings = json.dumps(winner.get("settings") or {}) if winner.get("settings") else ""
        return [precision, *ticked, settings, gr.update(selected="generate")]

    @_engine_errors
    def history(model, device, status, technique, since, limit):
        f = validate_history(model, device, status, technique, since, None, limit or 200)
        rows = studio.runlog.runs(
            model=f.model,
            device=f.device,
            status=f.status,
            technique=f.technique,
            since=f.since,
            until=f.until,
            limit=f.limit,
        )
        records = [report.log_record(r) for r in rows]
        return views.history_outputs(records, exports.csv_file(records))

    @_engine_errors
    def load_config(run_id):
        """A logged run's configuration, ready in Generate's form (precision and technique groups
        included)."""
        row = studio.runlog.get_run(validate_run_id(run_id))
        opts = row["requested"] or []
        groups = techniques_by_group("auto")
        ticked = [[t["name"] for t in groups[g] if t["name"] in opts] for g in GROUPS]
        model = row["model"] if row["model"] in SPECS else DEFAULT_MODEL
        custom = "" if row["model"] in SPECS else row["model"]
        settings = json.dumps(row["settings"]) if row.get("settings") else ""
        return (
            model,
            custom,
            row["dtype"],
            *ticked,
            row["prompt"],
            row["negative_prompt"],
            row["seed"],
            row["steps"],
            row["guidance"],
            row["width"],
            row["height"],
            row["scheduler"],
            settings,
            gr.update(selected="generate"),
        )

    def load_selected(table, evt: gr.SelectData):
        """A click on a History row loads that run into Generate."""
        return load_config(table.iloc[evt.index[0]]["Run"])

    @_engine_errors
    def shard(model, custom_model, name, max_shard_size):
        model, name = validate_shard_target(_model_name(model, custom_model), name)
        data = shard_model(model, studio_settings.home() / "sharded" / name, max_shard_size)
        rows = [
            {
                "component": c["name"],
                "file": s["file"],
                "MB": round(s["bytes"] / 1e6, 3),
                "tensors": s["tensors"],
            }
            for c in data["components"]
            for s in c["shards"]
        ]
        return data, pd.DataFrame(rows, columns=["component", "file", "MB", "tensors"])

    def system():
        data = report.system_facts(studio)
        return data, *views.system_tables(data)

    return {
        "generate": generate,
        "generate_form": generate_form,
        "retry_offer": retry_offer,
        "apply_advice": apply_advice,
        "cancel": cancel,
        "compare": compare,
        "ladder": run_ladder,
        "autotune": autotune,
        "apply_winner": apply_winner,
        "history": history,
        "load_config": load_config,
        "load_selected": load_selected,
        "shard": shard,
        "system": system,
        "export_db": lambda: exports.database_copy(studio),
    }
