"""Cards read back: one file, a folder of them (an older schema migrated, a newer one refused with a
sentence), and one table per model across the machines they come from.

Schema 0 was the card's first draft: `{"version": 0, "machine": {"cpu", "cores", "gpu", "torch"}, "date",
"results": {model: {"shape": [width, height, steps], "baseline_s", "exact": {...}, "lossy": {...}}}}` with
`{"config", "seconds", "speedup", "psnr_db"}` per winner. `migrate` turns it into schema 1; what it did not
record is null.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from studio import checks, report
from studio.cards import wording
from studio.cards.card import SCHEMA, baseline_of
from studio.cards.machine import display_name, fingerprint
from studio.cards.picks import CHANGES, KEEPS, pick
from studio.errors import ValidationError

log = logging.getLogger(__name__)
MAX_CARD_BYTES = 2_000_000
DOCS_CARDS = Path(__file__).resolve().parents[2] / "docs" / "cards"  # the project's own measurements


def _row(config: str, seconds: float | None, winner: dict[str, Any] | None = None) -> dict[str, Any]:
    from studio.report import KEYS

    row = {**dict.fromkeys(KEYS), "config": config, "status": "ok", "applied": [], "warnings": []}
    row.update(seconds_per_image=seconds, verdict="baseline" if winner is None else None)
    if winner:
        row.update(
            speedup=winner.get("speedup"),
            psnr_db=winner.get("psnr_db"),
            seconds_per_image=winner.get("seconds"),
        )
    return row


def _from_v0(data: dict[str, Any]) -> dict[str, Any]:
    """A schema-0 card as schema 1."""
    machine = data.get("machine") or {}
    system: dict[str, Any] = {
        "cpu": machine.get("cpu"),
        "cpu_count": machine.get("cores"),
        "gpus": [{"name": machine["gpu"], "memory_gb": None}] if machine.get("gpu") else [],
        "versions": {"torch": machine["torch"]} if machine.get("torch") else {},
    }
    system.update(name=display_name(system), fingerprint=fingerprint(system))
    models = []
    for model, result in (data.get("results") or {}).items():
        width, height, steps = (list(result.get("shape") or []) + [None] * 3)[:3]
        found = [
            (kind, result[key]) for kind, key in ((KEEPS, "exact"), (CHANGES, "lossy")) if result.get(key)
        ]
        rows = [_row("baseline", result.get("baseline_s"))] + [_row(w["config"], None, w) for _, w in found]
        models.append(
            {
                **dict.fromkeys(("guidance", "batch", "scheduler", "prompt", "seed", "device", "reference")),
                "model": model,
                "width": width,
                "height": height,
                "steps": steps,
                "baseline": baseline_of(rows[0], None),
                "winners": [pick(kind, row) for (kind, _), row in zip(found, rows[1:], strict=True)],
                "rows": rows,
                **{"kinds": {}, "search": None, "host": None, "commands": [], "notes": [], "seconds": None},
            }
        )
    return {
        "schema": 1,
        "suite": None,
        "created_at": data.get("date"),
        "source": f"migrated from a schema-0 card ({data.get('source') or 'no source given'})",
        "system": system,
        "device": "cuda" if machine.get("gpu") else "cpu",
        "options": None,
        "seconds": None,
        "models": models,
    }


MIGRATIONS = {0: _from_v0}  # schema N -> schema N + 1


def migrate(data: Any, name: str) -> dict[str, Any]:
    """`data` (a parsed card from `name`) in the current schema, or a `ValidationError` naming its version."""
    if not isinstance(data, dict):
        raise ValidationError(f"{name} is not a card: it holds no JSON object.")
    version = data.get("schema", data.get("version"))
    if not isinstance(version, int) or isinstance(version, bool):
        raise ValidationError(f"{name} is not a card: it names no schema version.")
    if version > SCHEMA:
        raise ValidationError(
            f"{name} is a card of schema version {version}; this studio reads versions up to {SCHEMA}. "
            "Update the studio to read it."
        )
    while version < SCHEMA:
        if version not in MIGRATIONS:
            raise ValidationError(f"{name} is a card of schema version {version}, which no migration reads.")
        data, version = MIGRATIONS[version](data), version + 1
    if not isinstance(data.get("models"), list) or not isinstance(data.get("system"), dict):
        raise ValidationError(f"{name} is a card of schema version {SCHEMA} without its system or models.")
    return data


def load_card(path: str | Path) -> dict[str, Any]:
    """One card file, in the current schema (see `migrate`)."""
    path = Path(path)
    raw = path.read_bytes()
    fix = "Leave only cards in the folder."
    card = migrate(checks.parse_json(f"The card {path.name}", raw, MAX_CARD_BYTES, fix=fix), path.name)
    for entry in card["models"]:  # a row written before a record key existed reads it as null
        entry["rows"] = [{**dict.fromkeys(report.KEYS), **row} for row in entry.get("rows") or []]
    card["path"] = str(path)
    return card


@dataclass
class Loaded:
    """The cards of some folders, and a sentence for each file that is not a card this studio reads."""

    cards: list[dict[str, Any]] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)


def load_folder(*folders: str | Path) -> Loaded:
    """Every `*.json` card in `folders` (a folder that does not exist holds none)."""
    loaded = Loaded()
    for folder in folders:
        for path in sorted(Path(folder).glob("*.json")) if Path(folder).is_dir() else []:
            try:
                loaded.cards.append(load_card(path))
            except (ValidationError, OSError) as exc:
                loaded.refused.append(str(exc))
    return loaded


def machine_name(card: dict[str, Any]) -> str:
    """How tables and menus name the machine a card measured: `studio.cards.machine.display_name` of its
    recorded CPU and GPUs (a card of one CPU reads alike whether measured or transcribed); a system that
    records neither keeps its `name`."""
    system = card["system"]
    if any(system.get(k) for k in ("cpu", "cpu_model", "gpus")) or not system.get("name"):
        return display_name(system)
    return system["name"]


def _cell(entry: dict[str, Any], kind: str, gpu: bool) -> str:
    first = wording.first_of(entry, kind)
    return wording.pick(first, gpu) if first else "–"


def _size(shape: str) -> tuple[int, ...]:
    """'sd15-arch 512x512, 50 steps, ...' -> (512, 512, 50): one shape's rows together, smallest first."""
    return tuple(int(n) for n in re.findall(r"\d+", shape.split(" ", 1)[-1])[:3])


def machine_tables(cards: list[dict[str, Any]], here: str | None = None) -> dict[str, list[dict[str, Any]]]:
    """One table per model: a row per card that measured it, by shape (smallest first), then fastest baseline
    first.

    Args:
        cards: loaded cards (`load_folder`).
        here: the running machine's fingerprint (`studio.cards.machine.this_fingerprint`): its cards
            are marked `this_machine`.
    """
    tables: dict[str, list[dict[str, Any]]] = {}
    for card in cards:
        gpu = str(card.get("device") or "").startswith("cuda")
        for entry in card["models"]:
            base = entry.get("baseline") or {}
            tables.setdefault(entry["model"], []).append(
                {
                    "device": machine_name(card),
                    "this_machine": here is not None and card["system"].get("fingerprint") == here,
                    "shape": wording.shape(entry),
                    "seconds_per_image": base.get("seconds_per_image"),
                    "steps_per_s": base.get("steps_per_s"),
                    "peak_memory_mb": base.get("peak_memory_mb"),
                    KEEPS: _cell(entry, KEEPS, gpu),
                    CHANGES: _cell(entry, CHANGES, gpu),
                    "suite": card.get("suite"),
                    "created_at": card.get("created_at"),
                    "source": card.get("source"),
                }
            )
    for rows in tables.values():
        rows.sort(
            key=lambda r: (_size(r["shape"]), r["seconds_per_image"] is None, r["seconds_per_image"] or 0.0)
        )
    return tables


COLUMNS = (
    ("device", lambda r: r["device"] + (" **(this machine)**" if r["this_machine"] else "")),
    ("shape", lambda r: r["shape"]),
    ("s / image", lambda r: wording.seconds(r["seconds_per_image"])),
    ("it/s", lambda r: "–" if r["steps_per_s"] is None else f"{r['steps_per_s']:.2f}"),
    ("peak MB", lambda r: "–" if r["peak_memory_mb"] is None else f"{r['peak_memory_mb']:,.0f}"),
    ("best keeping the math", lambda r: r[KEEPS]),
    ("best that changes the image (lossy)", lambda r: r[CHANGES]),
)


def machines_markdown(tables: dict[str, list[dict[str, Any]]]) -> str:
    """The tables as Markdown, one section per model (seconds, it/s and memory: the baseline's)."""
    parts = []
    for model, rows in tables.items():
        head = "| " + " | ".join(title for title, _ in COLUMNS) + " |"
        lines = [f"## {model}", "", head, "|" + "---|" * len(COLUMNS)]
        lines += ["| " + " | ".join(fn(r).replace("|", "\\|") for _, fn in COLUMNS) + " |" for r in rows]
        parts.append("\n".join(lines))
    return "\n\n".join(parts) or "_no cards_"
