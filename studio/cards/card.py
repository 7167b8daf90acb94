"""The card: one machine's run of the suite as JSON (versioned by `SCHEMA`), with a Markdown summary and a
contact sheet beside it, written all at once.

A card (schema 1) holds `schema`, `suite` (`studio.cards.suite.SUITE_VERSION`), `created_at`, `source`,
`system` (`studio.cards.machine.snapshot`, with its `fingerprint`), `device`, `options`, `seconds` and
`models`: per model its request (model, size, steps, guidance, batch, scheduler, prompt, seed, device), the
`reference` precision on a GPU, the `baseline`, the `winners` (each a configuration as Compare and Generate
take it, `kind` keeps_the_math or changes_the_image), `kinds` (every candidate measured), `rows` (the shared
vocabulary's records, `studio.report.KEYS`), `search`, `host`, `commands`, `notes` and `seconds`.
docs/cards.md describes every field.
"""

from __future__ import annotations

import json
import os
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from studio.cards import picks, wording
from studio.cards.machine import ABSENT, display_name
from studio.cards.suite import SUITE_VERSION, Case

SCHEMA = 1
BASELINE_FIGURES = (
    "seconds_per_image",
    "steps_per_s",
    "rounds",
    "first_call_s",
    "first_call_phase",
    "prepare_s",
    "peak_memory_mb",
    "fidelity",
    "prompt_score",
    "prompt_score_by",
)


def default_folder() -> Path:
    """Where cards are written unless told otherwise: `cards/` in the studio's home."""
    from studio import settings

    return settings.home() / "cards"


def baseline_of(record: dict[str, Any], label: str | None = "PyTorch fp32") -> dict[str, Any]:
    """The baseline row's headline figures."""
    return {"config": record["config"], "label": label, **{k: record.get(k) for k in BASELINE_FIGURES}}


def host_of(records: list[dict[str, Any]]) -> dict[str, Any]:
    """How busy the host was while the rows were measured (the worst row)."""
    busy = [r.get("host_busy_pct") for r in records if r.get("host_busy_pct") is not None]
    steal = [r.get("host_steal_pct") for r in records if r.get("host_steal_pct") is not None]
    return {
        "busy": any(r.get("host_busy") for r in records),
        "busy_pct": max(busy, default=None),
        "steal_pct": max(steal, default=None),
    }


def model_entry(
    case: Case,
    request: Any,
    records: list[dict[str, Any]],
    candidates: list[dict[str, Any]],
    search: dict[str, Any],
    notes: list[str],
    command: str,
) -> dict[str, Any]:
    """One model's part of a card, from its final Compare's `records` and classified `candidates`."""
    chosen = picks.winners(candidates)
    keep, lossy = (picks.best(chosen, kind) for kind in picks.KINDS)
    if keep and lossy and (lossy.get("speedup") or 0.0) <= (keep.get("speedup") or 0.0):
        notes = [
            *notes,
            "Changing the image buys nothing here: the best that keeps the math is as fast or faster.",
        ]
    return {
        "model": case.model,
        "width": request.width,
        "height": request.height,
        "steps": request.steps,
        "guidance": request.guidance,
        "batch": request.batch,
        "scheduler": request.scheduler,
        "prompt": request.prompt,
        "seed": request.seed,
        "device": request.device,
        "reference": case.reference,
        "keep_db": case.keep_db,
        "baseline": baseline_of(records[0]),
        "winners": chosen,
        "kinds": {c["config"]: c["kind"] for c in candidates},
        "rows": records,
        "search": search,
        "host": host_of(records),
        "commands": [command],
        "notes": notes,
        "seconds": None,
    }


def new_card(
    system: dict[str, Any], options: Any, device: str, models: list[dict[str, Any]], seconds: float
) -> dict[str, Any]:
    """A measured card (`options`: `studio.cards.options.Options`)."""
    return {
        "schema": SCHEMA,
        "suite": SUITE_VERSION,
        "created_at": datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
        "source": f"measured with `{options.command()}`",
        "system": system,
        "device": device,
        "options": options.as_json(),
        "seconds": round(seconds, 1),
        "models": models,
    }


def stem(card: dict[str, Any]) -> str:
    """The card's file name without its extension: when, what and which machine."""
    when = re.sub(r"[^0-9TZ]", "", card.get("created_at") or "")
    system = card.get("system") or {}
    what = (system.get("gpus") or [{}])[0].get("name") or system.get("cpu_model") or "machine"
    slug = re.sub(r"[^a-z0-9]+", "-", what.lower()).strip("-")[:40]
    return f"{when}-{slug}-{(system.get('fingerprint') or '')[:8]}".strip("-")


def summary(card: dict[str, Any]) -> str:
    """The card as Markdown: the machine, then per model its winners and its rows."""
    system = card["system"]
    versions = ", ".join(f"{k} {v}" for k, v in (system.get("versions") or {}).items() if v != ABSENT)
    lines = [
        f"# Card: {display_name(system)}",
        "",
        f"Suite {card.get('suite') or '–'}, card schema {card['schema']}, "
        f"{card.get('created_at') or 'undated'}, on {card.get('device')}"
        + (f"; {card['seconds']:g} s in all" if card.get("seconds") is not None else "")
        + f". {versions}.",
        "",
        f"Source: {card['source']}.",
    ]
    gpu = str(card.get("device")).startswith("cuda")
    for entry in card["models"]:
        lines += ["", f"## {wording.shape(entry)}", "", f"- baseline: {wording.baseline(entry)}"]
        lines += [
            f"- {title}: {wording.picks_of(entry, kind, gpu)}" for kind, title in wording.KIND_TITLES.items()
        ]
        if (entry.get("search") or {}).get("summary"):
            lines.append(f"- search: {entry['search']['summary']}")
        lines += [f"- note: {n}" for n in entry.get("notes") or []]
        lines += ["", rows_markdown(entry)]
    return "\n".join(lines) + "\n"


def _kind(entry: dict[str, Any], row: dict[str, Any]) -> str:
    if row["status"] != "ok":
        return row["status"]
    if row.get("verdict") == "baseline" or row["config"] == entry.get("reference"):
        return "baseline" if row.get("verdict") == "baseline" else "reference"
    return picks.WORDS.get((entry.get("kinds") or {}).get(row["config"]), "")


def rows_markdown(entry: dict[str, Any]) -> str:
    """A model's rows as a Markdown table, with the host's note under it when it was busy."""
    from studio import report

    columns = (
        ("Configuration", lambda r: f"`{r['config']}`"),
        ("Kind", lambda r: _kind(entry, r)),
        ("s / image", lambda r: wording.seconds(r.get("seconds_per_image"))),
        ("it/s", lambda r: "–" if r.get("steps_per_s") is None else f"{r['steps_per_s']:.2f}"),
        ("Speedup (range)", report.ratio),
        ("Verdict", lambda r: r.get("verdict") or f"{r['status']}: {r.get('error') or ''}"),
        ("First call", report.first_call),
        ("Peak memory", report.memory),
        ("Image vs baseline", report.quality),
        ("Fidelity", lambda r: "–" if r.get("fidelity") is None else f"{r['fidelity']:.0%}"),
        ("Prompt score", report.prompt_score),
    )
    lines = ["| " + " | ".join(t for t, _ in columns) + " |", "|" + "---|" * len(columns)]
    for row in entry["rows"]:
        lines.append("| " + " | ".join(str(fn(row)).replace("|", "\\|") for _, fn in columns) + " |")
    notes = [n for n in (report.prompt_score_note(entry["rows"]), report.host_note(entry["rows"])) if n]
    return "\n".join(lines + [f"\n{n}" for n in notes])


def save(run: Any, out: str | Path | None = None) -> dict[str, Path]:
    """Write the card (`<stem>.json`), its summary (`.md`) and contact sheet (`.png`) into `out` (default:
    `default_folder()`). Each file is written under a temporary name and renamed once all three are
    written: a failure leaves none of them."""
    from studio.cards.sheet import contact_sheet

    folder = Path(out) if out else default_folder()
    folder.mkdir(parents=True, exist_ok=True)
    name = stem(run.card)
    targets = {ext: folder / f"{name}.{ext}" for ext in ("png", "md", "json")}
    run.card["files"] = {"summary": targets["md"].name, "sheet": targets["png"].name}
    temps = {ext: path.with_name(f".{path.name}.{os.getpid()}.tmp") for ext, path in targets.items()}
    done: list[Path] = []
    try:
        contact_sheet(run.runs).save(temps["png"], format="PNG")
        temps["md"].write_text(summary(run.card))
        temps["json"].write_text(json.dumps(run.card, indent=1, default=str) + "\n")
        for ext in ("png", "md", "json"):  # the card last: a folder of cards never shows one half-written
            os.replace(temps[ext], targets[ext])
            done.append(targets[ext])
    except BaseException:
        for path in [*temps.values(), *done]:
            path.unlink(missing_ok=True)
        raise
    return {"card": targets["json"], "summary": targets["md"], "sheet": targets["png"]}
