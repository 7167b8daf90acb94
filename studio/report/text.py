"""Records as text: the figures in words and units as a person reads them (captions, table rows, Markdown
with a busy-host warning), CSV for spreadsheets, and a command's printed result."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

from studio import phases
from studio.report.vocabulary import KEYS


def seconds(value: float | None) -> str:
    if value is None:
        return "–"
    return f"{value:.2f} s" if value >= 0.1 else f"{value * 1000:.0f} ms"


def first_call(record: dict[str, Any]) -> str:
    """'2.00 s (package: loaded compiled, 1.30 s of it)', '41.3 s (cold: compiled, converted or calibrated
    now, 40.1 s of it)', '0.31 s', or '–': the first call and the phase its techniques' preparing paid."""
    first, phase = record.get("first_call_s"), record.get("first_call_phase")
    if phase is None:
        return seconds(first)
    paid = f"{phase}: {phases.MEANING[phase]}"
    if first is None:  # a phase paid by a later call (a new shape)
        return f"– ({paid} in {seconds(record.get('prepare_s'))})"
    return f"{seconds(first)} ({paid}, {seconds(record.get('prepare_s'))} of it)"


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


def run_memory(record: dict[str, Any]) -> str:
    """What a run itself needed: '1,650 MB (weights 1,620 MB + 30 MB during the call)', or '–'."""
    total, weights = record.get("run_memory_mb"), record.get("weights_mb")
    if total is None or weights is None:
        return "–"
    return f"{total:,.0f} MB (weights {weights:,.0f} MB + {total - weights:,.0f} MB during the call)"


def breakable(text: str) -> str:
    """Text as a narrow table cell shows it: a configuration may break after each '+' or ',' and a range
    ('(1.01–1.30)') stays whole (zero-width spaces and word joiners; the cell's value is unchanged)."""
    return text.replace("+", "+\u200b").replace(",", ",\u200b").replace("–", "\u2060–\u2060")


def quality(record: dict[str, Any]) -> str:
    if record.get("verdict") == "baseline":
        return "reference"
    if record.get("psnr_db") is None and record.get("ssim") is not None:
        return "identical"
    if record.get("psnr_db") is None:
        return "–"
    return f"{record['psnr_db']:.1f} dB · SSIM {record['ssim']:.3f}"


def prompt_score(record: dict[str, Any]) -> str:
    """'31.2 (-0.4)': the prompt score and its change from the baseline's in points; '31.2' for the baseline
    or a run alone; '–' without a score."""
    score, change = record.get("prompt_score"), record.get("prompt_score_change")
    if score is None:
        return "–"
    return f"{score:.1f}" if change is None else f"{score:.1f} ({change:+.1f})"


def prompt_score_note(records: list[dict[str, Any]]) -> str | None:
    """What scored the records' prompt scores and why some have none, in sentences (None when neither is
    known: no record ran, or they were logged before prompt scores were)."""
    ok = [r for r in records if r["status"] == "ok"]
    scorers = sorted({r["prompt_score_by"] for r in ok if r.get("prompt_score_by")})
    missing = sorted({r["prompt_score_note"] for r in ok if r.get("prompt_score_note")})
    said = [
        f"the CLIP score of {by[5:]} (100 × the cosine of the image's and the prompt's embeddings)"
        if by.startswith("clip:")
        else f"the {by} (100 × the share of the prompt the model's own judge sees in the image)"
        for by in scorers
    ]
    sentences = [f"Prompt score: {'; '.join(said)}; in brackets its change from the baseline's, in points."]
    sentences = (sentences if said else []) + [f"No prompt score: {why}." for why in missing]
    return " ".join(sentences) or None


def steps_reused_note(records: list[dict[str, Any]]) -> str | None:
    """What each configuration's step cache reused, in one sentence (None when no record has a step cache):
    a cache that reused nothing only added its checks, which a user should see next to its speedup."""
    said = [
        f"{r['config']} {r['steps_reused_pct']:g}%"
        for r in records
        if r["status"] == "ok" and r.get("steps_reused_pct") is not None
    ]
    if not said:
        return None
    return f"Steps reused by the step cache (of the denoiser's calls in the last call): {'; '.join(said)}."


def table_notes(records: list[dict[str, Any]]) -> list[str]:
    """The sentences under a table of these records: what scored the prompt, what a step cache reused, and a
    busy host."""
    return [n for n in (prompt_score_note(records), steps_reused_note(records), host_note(records)) if n]


def lora_tags(loras: list[dict[str, Any]]) -> str:
    """A run's LoRAs as AUTOMATIC1111 writes them in a prompt: '<lora:night:0.5> <lora:x:1>'."""
    return " ".join(f"<lora:{lora['name']}:{lora['scale']:g}>" for lora in loras or ())


def caption(record: dict[str, Any]) -> str:
    """One line under an image: configuration · latency · speedup · verdict."""
    if record["status"] != "ok":
        return f"{record['config']} · {record['status']}: {record.get('error') or ''}"
    parts = [record["config"], seconds(record["latency_s"]), ratio(record)]
    if record.get("verdict") not in (None, "baseline"):
        parts.append(record["verdict"])
    return " · ".join(parts)


def latency(record: dict[str, Any]) -> str:
    """Per call; with a batch, per image too."""
    text = seconds(record.get("latency_s"))
    if (record.get("batch") or 1) > 1 and record.get("seconds_per_image") is not None:
        text += f" ({seconds(record['seconds_per_image'])} per image, batch {record['batch']})"
    return text


TABLE = (
    ("Configuration", lambda r: r["config"]),
    ("Latency", latency),
    ("Speedup (range)", ratio),
    ("Verdict", lambda r: r.get("verdict") or r["status"]),
    ("Peak memory", memory),
    ("Image vs baseline", quality),
    ("Prompt score", prompt_score),
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
                    "Prompt score": "",
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
    return "\n".join(lines + [f"\n{note}" for note in table_notes(records)])


def to_csv(records: list[dict[str, Any]]) -> str:
    """Records as CSV, the shared keys as columns (lists as JSON)."""
    columns = [k for k in KEYS] + sorted({k for r in records for k in r} - set(KEYS))
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=columns, extrasaction="ignore")
    writer.writeheader()
    for r in records:
        writer.writerow({k: json.dumps(v) if isinstance(v, list | dict) else v for k, v in r.items()})
    return buf.getvalue()


def emit(data: Any, as_json: bool, text: str, file: Any = None) -> None:
    """Print a command's result: JSON for programs, the text for people (to `file`, default stdout)."""
    print(json.dumps(data, indent=2, default=str) if as_json else text, file=file)
