"""Runs as records in the shared vocabulary: a measured run (alone or against a sweep's baseline), a
configuration that did not run, and a row of the run log, each with the same keys and units."""

from __future__ import annotations

import math
import statistics
from typing import Any

from studio.measure.host import BUSY_PCT
from studio.recompiles import graph_builds
from studio.report.vocabulary import KEYS

MEMORY_RESOLUTION_MB = {
    "cpu_rss": 16.0,
    "cuda_allocated": 1.0,
}  # smallest change the probe can tell from noise


def _num(value: Any, digits: int) -> float | None:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return None
    return round(float(value), digits)


def _footprints(m: dict[str, Any], resident: bool) -> list[int]:
    """A run's memory footprint per call: what the call added above the memory in use, plus (`resident`) its
    pipeline's weights resident on the device when the call started."""
    added = m.get("memory_added_all") or [m["memory_added"]]
    return [a + (m["memory_resident"] if resident else 0) for a in added]


def _run_memory(m: dict[str, Any]) -> dict[str, float | None]:
    """What a run itself needed (`_footprints`, the median call) and its pipeline's weights within it, in MB:
    none for a run without the figures (failed, or logged before the resident weights were recorded)."""
    if m.get("memory_resident") is None or (m.get("memory_added") is None and not m.get("memory_added_all")):
        return {"run_memory_mb": None, "weights_mb": None}
    return {
        "run_memory_mb": _num(statistics.median(_footprints(m, resident=True)) / 2**20, 1),
        "weights_mb": _num(m["memory_resident"] / 2**20, 1),
    }


def _memory_change(m: dict[str, Any], base: dict[str, Any] | None) -> tuple[float | None, str | None]:
    """Change of the memory a configuration needs (`_footprints`) against the baseline, when the probe can
    resolve it. Not the peaks: in a sweep the peak also holds the other configurations' copies of the model.
    Runs logged before the resident weights were recorded are compared by what their calls added.
    """
    if base is None or m is base:
        return None, None
    resident = m.get("memory_resident") is not None and base.get("memory_resident") is not None
    mine, theirs = _footprints(m, resident), _footprints(base, resident)
    noise = max(max(mine) - min(mine), max(theirs) - min(theirs)) / 2**20
    change = (statistics.median(mine) - statistics.median(theirs)) / 2**20
    floor = max(MEMORY_RESOLUTION_MB.get(m.get("memory_kind", "cpu_rss"), 16.0), noise)
    if abs(change) <= floor:
        return None, "no measurable difference"
    return round(change, 1), None


def _throughput(latency: float | None, batch: int) -> dict[str, Any]:
    """Batch size, seconds per image and images per second from the latency of one call."""
    if latency is None or latency <= 0:
        return {"batch": batch, "seconds_per_image": None, "images_per_s": None}
    return {
        "batch": batch,
        "seconds_per_image": _num(latency / batch, 4),
        "images_per_s": _num(batch / latency, 3),
    }


def _reused_pct(counts: list[int] | None) -> float | None:
    """[reused, calls] (a step cache's count, studio.optimizations.transformer_caching) as a percentage."""
    if not counts or not counts[1]:
        return None
    return _num(100 * counts[0] / counts[1], 1)


def _figures(m: dict[str, Any]) -> dict[str, Any]:
    """The measured figures in the shared vocabulary, from a run's metrics and quality, or from its run-log
    row (both name them as the run log's columns)."""
    lat = m.get("latency_all") or ([m["latency_s"]] if m.get("latency_s") is not None else [])
    stats, psnr = m.get("stats") or {}, m.get("psnr")
    return {
        "latency_s": _num(m.get("latency_s"), 4),
        "latency_spread_s": _num(max(lat) - min(lat), 4) if lat else None,
        "rounds": len(lat) or None,
        "speedup": _num(m.get("speedup"), 3),
        "speedup_min": _num(m.get("speedup_min"), 3),
        "speedup_max": _num(m.get("speedup_max"), 3),
        "verdict": m.get("verdict"),
        "steps_per_s": _num(m.get("steps_per_second"), 2),
        **_throughput(m.get("latency_s"), m.get("batch") or 1),
        "first_call_s": _num(m.get("first_call_seconds"), 3),
        "first_call_phase": m.get("first_call_phase"),
        "prepare_s": _num(m.get("prepare_seconds"), 3),
        "recompiles": graph_builds(stats) or None,
        "steps_reused_pct": _reused_pct(stats.get("steps_reused")),
        "peak_memory_mb": None if m.get("peak_memory") is None else _num(m["peak_memory"] / 2**20, 1),
        **_run_memory(m),
        "memory_kind": m.get("memory_kind"),
        "psnr_db": None if psnr is None or math.isinf(psnr) else _num(psnr, 2),
        "ssim": _num(m.get("ssim"), 4),
        "fidelity": (m.get("fidelity") or {}).get("score"),
        "prompt_score": _num(m.get("prompt_score"), 2),
        "prompt_score_by": m.get("prompt_score_by"),
        "prompt_score_change": _num(m.get("prompt_score_change"), 2),
        "prompt_score_note": m.get("prompt_score_note"),
        "host_busy_pct": m.get("host_busy_pct"),
        "host_steal_pct": m.get("host_steal_pct"),
        "host_busy": any(
            v is not None and v > BUSY_PCT for v in (m.get("host_busy_pct"), m.get("host_steal_pct"))
        ),
        "warmup_unsettled": bool(m.get("warmup_unsettled")),
        "cpu_threads": stats.get("cpu_threads"),
    }


def run_record(result: Any, baseline: Any = None) -> dict[str, Any]:
    """A `RunResult` (and its baseline in a sweep) in the shared vocabulary."""
    m, base = result.metrics, baseline.metrics if baseline is not None else None
    change, note = _memory_change(m, base)
    record = {
        "run_id": result.run_id,
        "config": result.label,
        "loras": [a.record() for a in result.request.loras],
        "lora_switch_s": _num((m.get("stats") or {}).get("lora_switch_seconds"), 4),
        "status": "ok",
        "applied": list(result.applied),
        **_figures({**m, **result.quality, "batch": result.request.batch}),
        "pays_off_after": pays_off_after(m, base),
        "memory_change_mb": change,
        "memory_note": note,
        "device": result.request.device,
        "seed": result.request.seed,
        "image_path": result.image_path,
        "warnings": list(result.warnings),
        "error": None,
    }
    return {key: record[key] for key in KEYS}


def single_record(result: Any) -> dict[str, Any]:
    """One run on its own (Generate): the shared vocabulary, plus what only a single run has."""
    m = result.metrics
    return {
        **run_record(result),
        "load_s": _num(m["load_seconds"], 3),
        "switch_s": _num(m["switch_seconds"], 4),
        "device_map": (m.get("stats") or {}).get("hf_device_map"),
        "memory_estimate": (m.get("stats") or {}).get("memory_estimate"),
    }


def failed_record(config: str, error: str, status: str = "failed") -> dict[str, Any]:
    """A configuration that did not produce a measurement, in the shared vocabulary."""
    return {
        **dict.fromkeys(KEYS),
        "config": config,
        "status": status,
        "error": error,
        "applied": [],
        "loras": [],
        "warnings": [],
        "host_busy": False,
        "warmup_unsettled": False,
    }


def pays_off_after(m: dict[str, Any], base: dict[str, Any] | None) -> int | None:
    """After how many images a configuration's one-off first-call cost is repaid by its per-image saving."""
    first, latency = m.get("first_call_seconds"), m["latency_s"]
    if base is None or first is None or first <= latency or latency >= base["latency_s"]:
        return None
    return math.ceil((first - latency) / (base["latency_s"] - latency))


def log_record(row: dict[str, Any]) -> dict[str, Any]:
    """A row of the run log (`runs` table) in the shared vocabulary, with when and which model."""
    record = {
        "run_id": row["id"],
        "config": row.get("config_label"),
        "loras": row.get("loras") or [],
        "lora_switch_s": _num((row.get("stats") or {}).get("lora_switch_seconds"), 4),
        "status": row.get("status"),
        "applied": row.get("applied") or [],
        **_figures(row),
        "pays_off_after": None,
        "memory_change_mb": None,
        "memory_note": None,
        "device": row.get("device"),
        "seed": row.get("seed"),
        "image_path": row.get("image_path"),
        "warnings": [],
        "error": row.get("error"),
    }
    return {
        **{key: record[key] for key in KEYS},
        "created_at": row.get("created_at"),
        "model": row.get("model"),
    }
