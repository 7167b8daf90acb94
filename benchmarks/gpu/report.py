"""results.json -> results.md (the tables a person reads) and images.png (one contact sheet: every measured
configuration's image, captioned), for a finished run or one a time limit stopped.

    python -m benchmarks.gpu.report OUT
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from benchmarks.gpu.contact_sheet import sheet
from benchmarks.gpu.results import is_peak, load, targets_of
from studio import report

DRY = (
    "**Dry run** on this CPU with the bundled model (tiny-shapes) and small numbers: it checks the code "
    "paths; its figures say nothing about a GPU."
)


def _value(value: Any, digits: int = 3) -> str:
    if value is None:
        return "–"
    return f"{value:.{digits}g}" if isinstance(value, float) else str(value)


def table(head: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(_value(v).replace("|", "\\|") for v in row) + " |" for row in rows]
    return "\n".join(lines)


def environment(env: dict[str, Any]) -> str:
    smi = env.get("nvidia_smi")
    smi = ", ".join(f"{k} {v}" for k, v in smi.items()) if isinstance(smi, dict) else smi
    versions = ", ".join(f"{k} {v}" for k, v in (env.get("versions") or {}).items())
    facts = [
        ["device", env.get("device")],
        ["GPU", env.get("gpu") or "none"],
        ["nvidia-smi", smi],
        ["torch / CUDA / cuDNN", f"{env.get('torch')} / {env.get('cuda')} / {env.get('cudnn')}"],
        ["Python", env.get("python")],
        ["libraries", versions],
        ["xformers", env.get("xformers")],
        ["requirements not met", "; ".join(env.get("requirements_unmet") or []) or "none"],
    ]
    return table(["", ""], facts)


def targets(rows: list[dict[str, Any]]) -> str:
    met = {True: "met", False: "**not met**", None: "not judged"}
    body = [[r["target"], r["value"], r["config"], met[r["met"]], r.get("note") or ""] for r in rows]
    return table(["Target", "Measured", "Configuration", "Verdict", "Note"], body)


def compute_limit(section: dict[str, Any]) -> str:
    peaks = [e for role, e in section.items() if is_peak(role)]
    lines = [
        f"Measured matmul peak: {_value(p.get('tflops'))} TFLOP/s ({p.get('dtype')}, n={p.get('n')})."
        for p in peaks
    ] or ["Measured matmul peak: –"]
    head = [
        "Model",
        "Denoiser GFLOP per call (batch)",
        "GFLOP per image",
        "s at peak",
        "Best config",
        "Best s/image",
    ]
    body = [
        [
            f"{e['model']} {e['side']}x{e['side']}, {e['steps']} steps"
            + (f" ({e['unet_calls']} denoiser calls)" if e.get("unet_calls") else ""),
            f"{e['unet_gflops_per_call']} ({e['unet_batch']})",
            e["gflops_per_image"],
            e["seconds_at_peak"],
            e.get("best_config"),
            e.get("best_seconds_per_image"),
        ]
        + [f"{e['fraction_of_peak']:.1%}" if e.get("fraction_of_peak") is not None else "–"]
        for role, e in section.items()
        if not is_peak(role)
    ]
    text = "\n".join(lines)
    return text + "\n\n" + table([*head, "Fraction of peak"], body) if body else text


def _revert(r: dict[str, Any]) -> str:
    exact = {True: "yes", False: "**no**", None: "–"}[r.get("revert_exact")]
    return f"{exact} ({r['revert_note']})" if r.get("revert_note") else exact


TECHNIQUE_COLUMNS = (
    ("Technique", lambda r: r.get("technique") or ""),
    ("Revert exact", _revert),
    ("Baseline in the same rounds", lambda r: report.seconds(r.get("baseline_s"))),
    ("Steps reused", lambda r: "–" if r.get("steps_reused_pct") is None else f"{r['steps_reused_pct']:g}%"),
)
MEMORY_COLUMNS = (
    ("Technique", lambda r: r.get("technique") or ""),
    ("Added during the call", lambda r: f"{r['added_mb']:,.0f} MB" if r.get("added_mb") is not None else "–"),
)

SHARED_PEAK = (
    "Peak memory in this table is the process's peak during the call while the Compare holds its other "
    "configurations' copies of the model; the memory section measures each configuration alone."
)
LADDER_COLUMNS = (("Step", lambda r: r["step"]),)


def _title(kind: str, s: dict[str, Any]) -> str:
    extra = f", batch {s['batch']}" if s.get("batch") else ""
    base = f" (baseline {s['baseline']})" if s.get("baseline") else ""
    return f"## {kind}: {s['model']} {s['side']}x{s['side']}, {s['steps']} steps{extra}{base}"


def markdown(data: dict[str, Any]) -> str:
    """The whole report."""
    parts = ["# GPU benchmark through the studio's engine"]
    if data.get("dry_run"):
        parts.append(DRY)
    parts.append(
        f"Status: {data.get('status')}; started {data.get('started')}, finished {data.get('finished')}."
    )
    parts += ["## Environment", environment(data.get("environment") or {})]
    parts += ["## Targets", targets(targets_of(data))]
    parts += ["## Compute limit", compute_limit(data.get("compute-limit") or {})]
    for key, kind, columns in (
        ("techniques", "Techniques", TECHNIQUE_COLUMNS),
        ("memory", "Memory", MEMORY_COLUMNS),
    ):
        for section in (data.get(key) or {}).values():
            parts += [_title(kind, section), report.markdown(section["rows"], columns)]
            parts += [SHARED_PEAK] if key == "techniques" else []
    for section in (data.get("ladder") or {}).values():
        parts += [_title("Ladder", section), report.markdown(section["rows"], LADDER_COLUMNS)]
    if data.get("notes"):
        parts += ["## Notes", "\n".join(f"- {n}" for n in data["notes"])]
    return "\n\n".join(parts) + "\n"


def write(out: Path) -> None:
    """results.md and images.png next to results.json."""
    data = load(out)
    (out / "results.md").write_text(markdown(data))
    sheet(data, out / "images.png")


if __name__ == "__main__":
    write(Path(sys.argv[1] if len(sys.argv) > 1 else "gpu-out"))
