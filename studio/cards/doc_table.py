"""docs/benchmarks.md's "What is fastest where" table, rendered from the cards in docs/cards/.

The cards are the source: a figure changes in its card, then `python -m studio.cards.doc_table` writes the
table into docs/benchmarks.md again (tests/cards/test_cards_doc_table.py fails while the two differ).
One row per card that measured sd15-arch, GPUs first, then by the baseline's seconds per image.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from studio.cards import wording
from studio.cards.collection import DOCS_CARDS, load_folder, machine_name
from studio.cards.picks import CHANGES, KEEPS

ROOT = Path(__file__).resolve().parents[2]
CARDS = DOCS_CARDS
DOC = ROOT / "docs" / "benchmarks.md"
MODEL = "sd15-arch"
HEADER = (
    "| device | model and shape | baseline | best keeping the math | best that changes the image | command |"
)


def _is_gpu(card: dict[str, Any]) -> bool:
    return str(card.get("device") or "").startswith("cuda")


def _order(item: tuple[dict[str, Any], dict[str, Any]]) -> tuple[bool, float]:
    card, entry = item
    return (not _is_gpu(card), entry["baseline"].get("seconds_per_image") or 0.0)


def render(cards: list[dict[str, Any]], model: str = MODEL) -> str:
    """The table for `model`: device, shape, baseline, the best of each kind and the commands."""
    rows = sorted(((c, e) for c in cards for e in c["models"] if e["model"] == model), key=_order)
    lines = [HEADER, "|---|---|---|---|---|---|"]
    for card, entry in rows:
        gpu = _is_gpu(card)
        cells = [
            machine_name(card),
            wording.shape(entry),
            wording.baseline(entry),
            wording.picks_of(entry, KEEPS, gpu),
            wording.picks_of(entry, CHANGES, gpu),
            "; ".join(f"`{c}`" for c in entry.get("commands") or []) or "–",
        ]
        lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    return "\n".join(lines)


def table_in(doc: str) -> str:
    """The table in `doc` that starts with `HEADER` (its lines up to the first that is not a table row)."""
    lines = doc.split("\n")
    start = lines.index(HEADER)
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
    return "\n".join(lines[start:end])


def docs_cards(folder: Path = CARDS) -> list[dict[str, Any]]:
    """The project's own cards; a file among them that does not load is an error here."""
    loaded = load_folder(folder)
    if loaded.refused:
        raise ValueError("; ".join(loaded.refused))
    return loaded.cards


def write(doc: Path = DOC, folder: Path = CARDS) -> bool:
    """Write the rendered table into `doc` in place of the old one; whether anything changed."""
    old = doc.read_text()
    new = old.replace(table_in(old), render(docs_cards(folder)), 1)
    if new != old:
        doc.write_text(new)
    return new != old


if __name__ == "__main__":
    changed = write()
    print(f"{DOC.relative_to(ROOT)}: {'table written' if changed else 'table already up to date'}")
    sys.exit(0)
