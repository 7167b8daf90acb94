"""One vocabulary for every face: a measured run -> a record with the same keys and units everywhere,
and records -> Markdown and CSV tables.

`/generate`, `/compare`, `/ladder`, `/autotune`, `/history`, the CLI's `--json`, the CSV and Markdown exports
and the run log's export all speak in `KEYS`; `docs/api.md` lists them with their units.
"""

from __future__ import annotations

import csv
import io
import json
import math
import statistics
from typing import Any

from studio.measure.host import BUSY_PCT

# key -> (unit, meaning). The order is the order of CSV columns.
KEYS: dict[str, tuple[str, str]] = {
    "run_id": ("", "the run's id in the run log"),
    "config": ("", "the configuration: technique names joined by '+', or 'baseline'"),
    "status": ("", "ok, failed, cancelled, interrupted, running or skipped"),
    "applied": ("", "the techniques actually applied, in order"),
    "latency_s": ("s", "median wall time of one pipeline call (warm-ups excluded)"),
    "latency_spread_s": ("s", "max - min of the timed calls"),
    "rounds": ("", "timed calls (one per interleaved round in a sweep)"),
    "speedup": ("x", "median over rounds of baseline time / this configuration's time, same round"),
    "speedup_min": ("x", "lowest per-round speedup"),
    "speedup_max": ("x", "highest per-round speedup"),
    "verdict": ("", "faster, slower or within noise (from the per-round range); baseline for the baseline"),
    "steps_per_s": ("1/s", "denoising steps per second at the median latency"),
    "first_call_s": ("s", "the first call's time (it pays for traces and compiles)"),
    "pays_off_after": ("images", "after how many images the first call's extra cost is repaid"),
    "recompiles": ("", "graphs traced or compiled for this pipeline so far"),
    "peak_memory_mb": (
        "MB",
        "peak memory of the process during a call: CUDA allocator peak, or peak RSS on CPU",
    ),
    "memory_kind": ("", "cuda_allocated (exact) or cpu_rss (process resident set, coarse)"),
    "memory_change_mb": (
        "MB",
        "memory a call adds above what was in use, minus the baseline's; "
        "null when below what the probe resolves",
    ),
    "memory_note": ("", "'no measurable difference' when memory_change_mb is null against a baseline"),
    "psnr_db": ("dB", "image difference from the baseline's image (null: identical or no baseline)"),
    "ssim": ("", "structural similarity to the baseline's image, 1 = identical"),
    "fidelity": ("", "tiny-shapes: share of the prompt's colour, shape and position the image shows"),
    "host_busy_pct": ("%", "share of all cores other processes used while this was measured"),
    "host_steal_pct": ("%", "share of CPU time the hypervisor gave to other guests meanwhile"),
    "host_busy": (
        "",
        f"true when either of the two above exceeded {BUSY_PCT:g}%: the figures are unreliable",
    ),
    "warmup_unsettled": ("", "true when the first timed call was much slower than the rest"),
    "device": ("", "the device the run used"),
    "seed": ("", "the seed of the run"),
    "image_path": ("", "where the first image was saved"),
    "warnings": ("", "sentences the user should read"),
    "error": ("", "why the run failed or was cancelled"),
}
MEMORY_RESOLUTION_MB = {
    "cpu_rss": 16.0,
    "cuda_allocated": 1.0,
}  # smallest change the probe can tell from noise


def _num(value: Any, digits: int) -> float | None:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return None
    return round(float(value), digits)


def _memory_change(m: dict[str, Any], base: dict[str, Any] | None) -> tuple[float | None, str | None]:
    """Change of the memory a call adds, against the baseline, when the probe can resolve it."""
    if base is None or m is base:
        return None, None
    mine, theirs = (
        m.get("memory_added_all") or [m["memory_added"]],
        base.get("memory_added_all") or [base["memory_added"]],
    )
    noise = max(max(mine) - min(mine), max(theirs) - min(theirs)) / 2**20
    change = (statistics.median(mine) - statistics.median(theirs)) / 2**20
    floor = max(MEMORY_RESOLUTION_MB.get(m.get("memory_kind", "cpu_rss"), 16.0), noise)
    if abs(change) <= floor:
        return None, "no measurable difference"
    return round(change, 1), None


def _figures(m: dict[str, Any]) -> dict[str, Any]:
    """The measured figures in the shared vocabulary, from a run's metrics and quality, or from its run-log
    row (both name them as the run log's columns)."""
    lat = m.get("latency_all") or ([m["latency_median"]] if m.get("latency_median") is not None else [])
    stats, psnr = m.get("stats") or {}, m.get("psnr")
    return {
        "latency_s": _num(m.get("latency_median"), 4),
        "latency_spread_s": _num(max(lat) - min(lat), 4) if lat else None,
        "rounds": len(lat) or None,
        "speedup": _num(m.get("speedup"), 3),
        "speedup_min": _num(m.get("speedup_min"), 3),
        "speedup_max": _num(m.get("speedup_max"), 3),
        "verdict": m.get("verdict"),
        "steps_per_s": _num(m.get("steps_per_second"), 2),
        "first_call_s": _num(m.get("first_call_seconds"), 3),
        "recompiles": (stats.get("trace_count") or 0) + (stats.get("compile_count") or 0) or None,
        "peak_memory_mb": None if m.get("peak_memory") is None else _num(m["peak_memory"] / 2**20, 1),
        "memory_kind": m.get("memory_kind"),
        "psnr_db": None if psnr is None or math.isinf(psnr) else _num(psnr, 2),
        "ssim": _num(m.get("ssim"), 4),
        "fidelity": (m.get("fidelity") or {}).get("score"),
        "host_busy_pct": m.get("host_busy_pct"),
        "host_steal_pct": m.get("host_steal_pct"),
        "host_busy": any(
            v is not None and v > BUSY_PCT for v in (m.get("host_busy_pct"), m.get("host_steal_pct"))
        ),
        "warmup_unsettled": bool(m.get("warmup_unsettled")),
    }


def run_record(result: Any, baseline: Any = None) -> dict[str, Any]:
    """A `RunResult` (and its baseline in a sweep) in the shared vocabulary."""
    m, base = result.metrics, baseline.metrics if baseline is not None else None
    change, note = _memory_change(m, base)
    record = {
        "run_id": result.run_id,
        "config": result.label,
        "status": "ok",
        "applied": list(result.applied),
        **_figures({**m, **result.quality}),
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
    }


def failed_record(config: str, error: str, status: str = "failed") -> dict[str, Any]:
    """A configuration that did not produce a measurement, in the shared vocabulary."""
    return {
        **dict.fromkeys(KEYS),
        "config": config,
        "status": status,
        "error": error,
        "applied": [],
        "warnings": [],
        "host_busy": False,
        "warmup_unsettled": False,
    }


def pays_off_after(m: dict[str, Any], base: dict[str, Any] | None) -> int | None:
    """After how many images a configuration's one-off first-call cost is repaid by its per-image saving."""
    first, latency = m.get("first_call_seconds"), m["latency_median"]
    if base is None or first is None or first <= latency or latency >= base["latency_median"]:
        return None
    return math.ceil((first - latency) / (base["latency_median"] - latency))


def log_record(row: dict[str, Any]) -> dict[str, Any]:
    """A row of the run log (`runs` table) in the shared vocabulary, with when and which model."""
    record = {
        "run_id": row["id"],
        "config": row.get("config_label"),
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


# ---- text: the same figures as a person reads them -------------------------------------------------------


def seconds(value: float | None) -> str:
    if value is None:
        return "–"
    return f"{value:.2f} s" if value >= 0.1 else f"{value * 1000:.0f} ms"


def ratio(record: dict[str, Any]) -> str:
    """'×1.09 (0.95–1.20)', '×1.00 (baseline)', or '–'."""
    if record.get("verdict") == "baseline":
        return "×1.00 (baseline)"
    if record.get("speedup") is None:
        return "–"
    low, high = record.get("speedup_min"), record.get("speedup_max")
    rng = f" ({low:.2f}–{high:.2f})" if low is not None and high is not None else ""
    return f"×{record['speedup']:.2f}{rng}"


def memory(record: dict[str, Any]) -> str:
    if record.get("peak_memory_mb") is None:
        return "–"
    text = f"{record['peak_memory_mb']:,.0f} MB"
    if record.get("memory_note"):
        return f"{text} (no measurable difference)"
    if record.get("memory_change_mb") is not None:
        return f"{text} ({record['memory_change_mb']:+,.0f} MB vs baseline)"
    return text


def quality(record: dict[str, Any]) -> str:
    if record.get("verdict") == "baseline":
        return "reference"
    if record.get("psnr_db") is None and record.get("ssim") is not None:
        return "identical"
    if record.get("psnr_db") is None:
        return "–"
    return f"{record['psnr_db']:.1f} dB · SSIM {record['ssim']:.3f}"


def caption(record: dict[str, Any]) -> str:
    """One line under an image: configuration · latency · speedup · verdict."""
    if record["status"] != "ok":
        return f"{record['config']} · {record['status']}: {record.get('error') or ''}"
    parts = [record["config"], seconds(record["latency_s"]), ratio(record)]
    if record.get("verdict") not in (None, "baseline"):
        parts.append(record["verdict"])
    return " · ".join(parts)


TABLE = (
    ("Configuration", lambda r: r["config"]),
    ("Latency", lambda r: seconds(r.get("latency_s"))),
    ("Speedup (range)", ratio),
    ("Verdict", lambda r: r.get("verdict") or r["status"]),
    ("Peak memory", memory),
    ("Image vs baseline", quality),
)


def readable_rows(
    records: list[dict[str, Any]], first: tuple[tuple[str, Any], ...] = ()
) -> list[dict[str, str]]:
    """Records as rows of words and rounded numbers with units, for the UI and Markdown."""
    rows = []
    for r in records:
        row = {title: fn(r) for title, fn in (*first, *TABLE)}
        if r["status"] not in ("ok",):
            row.update(
                {
                    "Latency": f"{r['status']}: {r.get('error') or ''}",
                    "Speedup (range)": "",
                    "Verdict": r["status"],
                    "Peak memory": "",
                    "Image vs baseline": "",
                }
            )
        rows.append(row)
    return rows


def host_note(records: list[dict[str, Any]]) -> str | None:
    """One sentence when any measurement of these records ran on a busy host."""
    busy = [r for r in records if r.get("host_busy")]
    if not busy:
        return None
    worst = max((r.get("host_busy_pct") or 0, r.get("host_steal_pct") or 0) for r in busy)
    return (
        f"⚠ The host was busy while this was measured (other processes {worst[0]:.0f}% of the CPU, steal "
        f"{worst[1]:.0f}%): these figures are unreliable. Measure again when the machine is quiet."
    )


def markdown(records: list[dict[str, Any]], first: tuple[tuple[str, Any], ...] = ()) -> str:
    """Records as a Markdown table (with a busy-host warning under it when there is one)."""
    rows = readable_rows(records, first)
    if not rows:
        return "_no results_"
    head = list(rows[0])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(str(row[h]).replace("|", "\\|") for h in head) + " |" for row in rows]
    note = host_note(records)
    return "\n".join(lines + ([f"\n{note}"] if note else []))


def to_csv(records: list[dict[str, Any]]) -> str:
    """Records as CSV, the shared keys as columns (lists as JSON)."""
    columns = [k for k in KEYS] + sorted({k for r in records for k in r} - set(KEYS))
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=columns, extrasaction="ignore")
    writer.writeheader()
    for r in records:
        writer.writerow({k: json.dumps(v) if isinstance(v, list | dict) else v for k, v in r.items()})
    return buf.getvalue()


def docs_table() -> str:
    """The keys as a Markdown table for docs/api.md."""
    lines = ["| key | unit | meaning |", "|---|---|---|"]
    lines += [f"| `{k}` | {unit or '–'} | {meaning} |" for k, (unit, meaning) in KEYS.items()]
    return "\n".join(lines)


def emit(data: Any, as_json: bool, text: str) -> None:
    """Print a command's result: JSON for programs, the text for people."""
    print(json.dumps(data, indent=2, default=str) if as_json else text)


def availability(device: str = "auto") -> list[dict[str, Any]]:
    """Every technique with whether it can run on `device` here, and why not."""
    from studio import devices
    from studio.optimizations import REGISTRY, unavailable_reason

    hw = devices.detect()
    resolved = devices.resolve(device, hw)
    return [
        {
            "name": o.name,
            "label": o.label,
            "group": o.group,
            "stage": o.stage,
            "reversible": o.reversible,
            "requires": list(o.requires),
            "conflicts": list(o.conflicts),
            "description": o.description,
            "settings": o.defaults,
            "unavailable": unavailable_reason(o, hw, resolved),
        }
        for o in REGISTRY.values()
    ]


def system_facts(studio: Any) -> dict[str, Any]:
    """Devices, capabilities, versions, techniques, loaded pipelines and the run log: what System shows."""
    from studio import devices, settings

    return {
        "hardware": devices.detect().summary(),
        "versions": settings.versions(),
        "techniques": availability(),
        "loaded_pipelines": [list(map(str, k)) for k in studio.manager.loaded()],
        "database": str(studio.runlog.path),
    }
