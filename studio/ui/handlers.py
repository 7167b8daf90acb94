"""Event handlers of the Gradio app (the ui package is the only importer of gradio).

Every engine error reaches browser and client users as `gr.Error` with the engine's sentence.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

import gradio as gr
import pandas as pd
from gradio.context import LocalContext

from pipelines.registry import SPECS, resolve
from studio import api, ladder
from studio import autotune as autotune_mod
from studio.errors import OutOfMemory, StudioError, describe
from studio.optimizations import REGISTRY
from studio.service import Studio

log = logging.getLogger(__name__)
DEFAULT_MODEL = "tiny-shapes"
GROUPS = ("speed", "memory", "precision")
PRESETS = ("bf16", "channels_last", "bf16,channels_last", "classic_attention", "attention_slicing", "autocast",
           "jit_trace_unet", "bf16,channels_last,jit_trace_unet", "vae_slicing", "vae_tiling", "torch_compile")
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
            raise gr.Error(f"Internal error ({type(exc).__name__}: {describe(exc)}). See the server log.") from exc

    return wrapper


def metrics_markdown(m: dict[str, Any]) -> str:
    first = "—" if m["first_call_s"] is None else f"{m['first_call_s']:.3f} s"
    fidelity = "" if m["fidelity"] is None else f" · prompt fidelity **{m['fidelity']:.0%}**"
    return (
        f"**{m['latency_s']:.3f} s** · {m['steps_per_s']:.1f} steps/s · peak {m['peak_memory_mb']:.0f} MB "
        f"({m['memory_kind']}) · load {m['load_s']:.2f} s · first call {first}{fidelity}  \n"
        f"Applied: `{', '.join(m['applied']) or 'baseline'}` · run #{m['run_id']} on {m['device']}, seed {m['seed']}"
        + (f"  \nDevice map: `{', '.join(f'{k} → {v}' for k, v in m['device_map'].items())}`" if m.get("device_map") else "")
        + "".join(f"  \n⚠ {w}" for w in m.get("warnings") or ())
    )


def _techniques_by_group(device: str) -> dict[str, list[dict]]:
    rows = [t for t in api.techniques(device) if REGISTRY[t["name"]].stage != "load" or t["name"] == "device_map_balanced"]
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


def _stop_check(cancels: api.Cancellations, request: gr.Request | None) -> Callable[[], str | None]:
    return cancels.begin(request.session_hash if request else "api", client_gone=client_gone_check())


def _checkbox_names() -> list[str]:
    """The techniques that have a checkbox in Generate, in the order the boxes are laid out."""
    groups = _techniques_by_group("auto")
    return [t["name"] for g in GROUPS for t in groups[g]]


def _model_name(model: str, custom: str) -> str:
    return (custom or "").strip() or model


def _model_defaults(model: str, custom: str):
    try:
        spec = resolve(_model_name(model, custom))
    except StudioError:
        return [gr.update()] * 5
    return spec.steps, spec.guidance, spec.width, spec.height, spec.example_prompt


def build_handlers(studio: Studio, cancels: api.Cancellations) -> dict[str, Callable]:
    """The event functions, closed over one Studio."""
    memory_advice: dict[str, tuple[str, ...]] = {}  # per session: what to retry with after an out-of-memory

    @_engine_errors
    def generate(model, custom_model, device, precision, optimizations, prompt, negative_prompt, seed, steps,
                 guidance, width, height, scheduler, settings, request: gr.Request, progress=gr.Progress()):
        req = api.build_request(_model_name(model, custom_model), device, precision, optimizations, prompt,
                                negative_prompt, seed, steps, guidance, width, height, scheduler, settings)
        should_stop = _stop_check(cancels, request)
        progress(0, desc="loading / configuring")
        session = request.session_hash if request else "api"
        memory_advice.pop(session, None)
        try:
            result = studio.generate(req, on_step=lambda i, n: progress((i, n), desc="denoising", unit="steps"),
                                     should_stop=should_stop)
        except OutOfMemory as exc:
            memory_advice[session] = exc.advice[:2]
            raise
        metrics = api.metrics_of(result)
        for warning in result.warnings:
            gr.Warning(warning)
        return result.images[0], metrics_markdown(metrics), metrics

    def retry_offer(request: gr.Request):
        """After a failed generate: a 'Retry with …' button when it ran out of memory."""
        advice = memory_advice.pop(request.session_hash if request else "api", ())
        if not advice:
            return gr.update(visible=False), []
        return gr.update(visible=True, value=f"Retry with {' + '.join(advice)}"), list(advice)

    def apply_advice(advice, selected):
        """Tick the advised memory techniques: the hidden selection the Generate event reads, and their boxes."""
        chosen = [*selected, *(a for a in advice if a not in selected)]
        return [gr.update(visible=False), chosen, *(name in chosen for name in _checkbox_names())]

    def cancel(request: gr.Request):
        cancels.cancel(request.session_hash if request else "api")
        return "Cancelling after the current step…"

    @_engine_errors
    def compare(model, custom_model, device, prompt, seed, steps, guidance, width, height, scheduler, presets,
                custom_configs, warmup, repeats, request: gr.Request, progress=gr.Progress()):
        req = api.build_request(_model_name(model, custom_model), device, "fp32", [], prompt, "", seed, steps,
                                guidance, width, height, scheduler)
        configs = list(presets or []) + [c.strip() for c in (custom_configs or "").splitlines() if c.strip()]
        result = api.compare(studio, req, configs, warmup, repeats,
                             progress=lambda i, n, label: progress((i, n), desc=f"running {label}"),
                             should_stop=_stop_check(cancels, request))
        return _compare_outputs(result)

    @_engine_errors
    def run_ladder(model, custom_model, device, prompt, seed, steps, width, height, warmup, repeats,
                   request: gr.Request, progress=gr.Progress()):
        req = api.build_request(_model_name(model, custom_model), device, "fp32", [], prompt, "", seed, steps,
                                None, width, height, None)
        _, rows = api.ladder(studio, req, warmup, repeats, progress=lambda i, n, s: progress((i, n), desc=s),
                             should_stop=_stop_check(cancels, request))
        table = pd.DataFrame([{k: r.get(k) for k in ("step", "status", "latency", "speedup", "config", "note")}
                              for r in rows])
        return ladder.markdown(rows), table

    @_engine_errors
    def autotune(model, custom_model, device, prompt, seed, steps, width, height, techniques, include_compile,
                 min_psnr, min_ssim, fidelity_drop, warmup, repeats, confirm_rounds, request: gr.Request,
                 progress=gr.Progress()):
        req = api.build_request(_model_name(model, custom_model), device, "fp32", [], prompt, "", seed, steps,
                                None, width, height, None)
        result = api.autotune(studio, req, techniques, include_compile, min_psnr, min_ssim, fidelity_drop, warmup,
                              repeats, confirm_rounds, progress=lambda i, n, s: progress((i, n), desc=f"measuring {s}"),
                              should_stop=_stop_check(cancels, request))
        data = autotune_mod.as_json(result)
        points = pd.DataFrame([
            {"config": r["config"], "latency_s": r["latency_median"], "psnr_db": min(r["psnr"], 100.0),
             "peak_memory_mb": r["peak_memory_mb"],
             "front": "Pareto front" if r["config"] in result.pareto_quality else "dominated"}
            for r in result.rows if r["status"] == "ok" and r["psnr"] is not None])
        table = pd.DataFrame([{k: r.get(k) for k in ("config", "stage", "latency_median", "speedup", "verdict", "psnr",
                                                       "ssim", "fidelity", "floor", "meets_floor")} for r in data["rows"]])
        return (autotune_mod.markdown(result), table, points, points, data, list(result.winner),
                gr.update(interactive=bool(result.winner), value=f"Apply {result.winner_label} in Generate"))

    def apply_winner(winner):
        """The winner's techniques ticked in Generate, and Generate shown."""
        chosen = list(winner or [])
        return [chosen, *(name in chosen for name in _checkbox_names()), gr.update(selected="generate")]

    @_engine_errors
    def history(model, device, status, technique, since, limit):
        rows = api.history(studio, model, device, status, technique, since, None, limit or 200)
        table = pd.DataFrame([{k: r.get(k) for k in api.HISTORY_COLUMNS} for r in rows], columns=api.HISTORY_COLUMNS)
        plot = table[table.status == "ok"][["created_at", "latency_median", "config_label"]]
        return table, plot, api.export_csv(rows)

    @_engine_errors
    def load_config(run_id):
        row = studio.runlog.get_run(int(run_id))
        opts = [o for o in row["requested"] if REGISTRY[o].dtype is None]
        model = row["model"] if row["model"] in SPECS else DEFAULT_MODEL
        custom = "" if row["model"] in SPECS else row["model"]
        return (model, custom, row["dtype"], opts, row["prompt"], row["negative_prompt"], row["seed"], row["steps"],
                row["guidance"], row["width"], row["height"], row["scheduler"], gr.update(selected="generate"))

    @_engine_errors
    def shard(model, custom_model, name, max_shard_size):
        report = api.shard(_model_name(model, custom_model), name, max_shard_size)
        rows = [{"component": c["name"], "file": s["file"], "MB": round(s["bytes"] / 1e6, 3), "tensors": s["tensors"]}
                for c in report["components"] for s in c["shards"]]
        return report, pd.DataFrame(rows, columns=["component", "file", "MB", "tensors"])

    def system():
        return api.system(studio)

    return {"generate": generate, "retry_offer": retry_offer, "apply_advice": apply_advice, "cancel": cancel,
            "compare": compare, "ladder": run_ladder, "autotune": autotune, "apply_winner": apply_winner,
            "history": history, "load_config": load_config, "shard": shard, "system": system,
            "export_db": lambda: api.export_database(studio)}



def _compare_outputs(result):
    ok = [(r, res) for r, res in zip(result.rows, result.results, strict=True) if res is not None]
    gallery = [(res.images[0], f"{r['config']}: {r['latency_median']:.3f}s x{r['speedup']:.2f} ({r['verdict']})")
               for r, res in ok]
    table = pd.DataFrame(api.compare_table(result)).dropna(axis=1, how="all").round(4)  # readable at 1280 px
    bars = pd.DataFrame([{"config": r["config"], "latency_s": r["latency_median"], "memory_mb": r["memory_added_mb"]}
                         for r, _ in ok])
    choices = [r["config"] for r, _ in ok[1:]]
    images = {r["config"]: res.images[0] for r, res in ok}
    slider = (images["baseline"], images[choices[0]]) if choices else None
    return (gallery, table, bars, bars, gr.update(choices=choices, value=choices[0] if choices else None), slider,
            images, api.export_csv(result.rows, "compare.csv"), api.export_markdown(result.rows), api.compare_table(result))
