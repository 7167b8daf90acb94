"""What the UI's endpoints do, without Gradio: plain arguments in, plain data out.

`ui.py` wraps these in Gradio events (adding progress, cancel and `gr.Error`); the
shapes returned here are what `gradio_client` users receive.
"""

from __future__ import annotations

import json
import re
import sqlite3
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from studio import devices, report, settings
from studio.errors import ValidationError
from studio.optimizations import REGISTRY, unavailable_reason
from studio.service import Studio
from studio.sweeps.autotune import AutotuneResult, floor_of, run_autotune
from studio.sweeps.compare import CompareResult, run_compare
from studio.sweeps.ladder import run_ladder
from studio.validate import GenerationRequest, parse_opts, validate_autotune, validate_counts, validate_history, validate_request

PRECISIONS = ("fp32", "bf16", "fp16")


class Cancellations:
    """Per-session cancel flags: the Cancel button sets one, the running step callback reads it."""

    def __init__(self):
        self._flags: dict[str, threading.Event] = {}
        self._lock = threading.Lock()

    def begin(self, session: str, client_gone: Callable[[], bool] | None = None) -> Callable[[], str | None]:
        """A stop check for a run of `session`: says why the run must stop, or None to go on.

        `client_gone` reports that whoever asked for the run is no longer listening (a closed
        browser tab or client), so the run stops instead of computing for nobody.
        """
        with self._lock:
            event = self._flags[session] = threading.Event()

        def should_stop() -> str | None:
            if event.is_set():
                return "cancelled by the user"
            if client_gone is not None and client_gone():
                return "the client disconnected"
            return None

        return should_stop

    def cancel(self, session: str) -> bool:
        with self._lock:
            event = self._flags.get(session)
        if event is None:
            return False
        event.set()
        return True


def parse_settings(value: Any) -> dict[str, Any]:
    """Technique settings from the API: a dict or a JSON object string."""
    if value in (None, "", {}):
        return {}
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            example = '{"torch_compile": {"mode": "default"}}'
            raise ValidationError(f"settings must be a JSON object such as {example}: {exc}") from None
    if not isinstance(value, dict):
        raise ValidationError("settings must be a JSON object mapping technique names to their settings.")
    return value


def build_request(model: Any, device: Any, precision: Any, optimizations: Any, prompt: Any, negative_prompt: Any,
                  seed: Any, steps: Any, guidance: Any, width: Any, height: Any, scheduler: Any,
                  settings_json: Any = None) -> GenerationRequest:
    """Validate an endpoint's arguments into a request (precision is a technique like the others)."""
    if precision not in (None, "", *PRECISIONS):
        raise ValidationError(f"precision must be one of {', '.join(PRECISIONS)}, not {precision!r}.")
    opts = list(optimizations or []) if not isinstance(optimizations, str) else [optimizations]
    if precision in ("bf16", "fp16"):
        opts.insert(0, precision)
    return validate_request(
        model=model, prompt=prompt, negative_prompt=negative_prompt, seed=seed, steps=steps, guidance=guidance,
        width=width, height=height, scheduler=scheduler or None, device=device or "auto", opts=opts,
        params=parse_settings(settings_json),
    )


def compare(studio: Studio, request: GenerationRequest, configs: list[str], warmup: Any, rounds: Any,
            progress=None, should_stop=None) -> CompareResult:
    counts = validate_counts(warmup, rounds)
    return run_compare(studio, request, configs, warmup=counts.warmup, rounds=counts.rounds, progress=progress,
                       should_stop=should_stop)


def ladder(studio: Studio, request: GenerationRequest, warmup: Any, rounds: Any, progress=None, should_stop=None):
    counts = validate_counts(warmup, rounds)
    return run_ladder(studio, request, warmup=counts.warmup, rounds=counts.rounds, progress=progress,
                      should_stop=should_stop)


def autotune(studio: Studio, request: GenerationRequest, techniques: Any, include_compile: Any, min_psnr: Any,
             min_ssim: Any, fidelity_drop: Any, warmup: Any, repeats: Any, confirm_rounds: Any, progress=None,
             should_stop=None) -> AutotuneResult:
    """The auto-tuner with the endpoint's plain arguments, checked at the one validation boundary."""
    checked = validate_autotune(min_psnr, min_ssim, fidelity_drop, warmup, repeats, confirm_rounds)
    return run_autotune(studio, request, floor=floor_of(checked), techniques=parse_opts(techniques) or None,
                        include_compile=bool(include_compile), warmup=checked.warmup, repeats=checked.repeats,
                        confirm_rounds=checked.confirm_rounds, progress=progress, should_stop=should_stop)


def history(studio: Studio, model: Any = None, device: Any = None, status: Any = None, technique: Any = None,
            since: Any = None, until: Any = None, limit: Any = 200) -> list[dict[str, Any]]:
    """Runs from the log, newest first, in the shared vocabulary."""
    f = validate_history(model, device, status, technique, since, until, limit)
    rows = studio.runlog.runs(model=f.model, device=f.device, status=f.status, technique=f.technique, since=f.since,
                              until=f.until, limit=f.limit)
    return [report.log_record(r) for r in rows]


SHARD_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def shard(model: Any, name: Any, max_shard_size: Any) -> dict[str, Any]:
    """Save `model` as sharded safetensors under the studio's home (`sharded/<name>`) and list the shards.

    The directory is chosen by name only, so a public studio never writes where a visitor points it.
    """
    from studio.shard import shard_model  # loads torch/diffusers machinery only when asked

    if not isinstance(name, str) or not SHARD_NAME.fullmatch(name):
        raise ValidationError("The shard folder name must be 1-64 letters, digits, '.', '_' or '-', "
                              "starting with a letter or digit.")
    if not isinstance(model, str) or not model.strip():
        raise ValidationError("Name the model to shard (a registry id, hub id or local directory).")
    return shard_model(model.strip(), settings.home() / "sharded" / name, max_shard_size)


def export_database(studio: Studio) -> str:
    """A consistent copy of the run log (SQLite backup API), safe to hand to a browser."""
    target = Path(tempfile.mkdtemp(prefix="studio-export-")) / "runs.db"
    with sqlite3.connect(target) as dst:
        studio.runlog.db.conn.backup(dst)
    return str(target)


def export_csv(records: list[dict[str, Any]], name: str = "runs.csv") -> str:
    target = Path(tempfile.mkdtemp(prefix="studio-export-")) / name
    target.write_text(report.to_csv(records))
    return str(target)


def export_markdown(records: list[dict[str, Any]], name: str = "compare.md") -> str:
    target = Path(tempfile.mkdtemp(prefix="studio-export-")) / name
    target.write_text(report.markdown(records) + "\n")
    return str(target)


def techniques(device: str = "auto") -> list[dict[str, Any]]:
    """Every technique with its group and, if it cannot run on `device` here, why."""
    hw = devices.detect()
    resolved = devices.resolve(device, hw)
    return [{"name": o.name, "label": o.label, "group": o.group, "description": o.description,
             "unavailable": unavailable_reason(o, hw, resolved)} for o in REGISTRY.values()]


def system(studio: Studio) -> dict[str, Any]:
    """Devices, capabilities, versions, techniques, cache and database: the System tab."""
    return {
        "hardware": devices.detect().summary(),
        "versions": settings.versions(),
        "techniques": techniques(),
        "loaded_pipelines": [list(map(str, k)) for k in studio.manager.loaded()],
        "database": str(studio.runlog.path),
    }
