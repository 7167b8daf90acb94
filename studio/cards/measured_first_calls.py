"""What the first call of a configuration costs, said before it runs, for every face (Generate's note,
`/estimate`, `python -m studio estimate`): the first calls this studio logged (`studio.engine.first_call`),
else the slowest a benchmark card measured (this studio's cards and docs/cards), with its machine; said only
where the first call costs clearly more than a later one."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from studio import report
from studio.cards.card import default_folder
from studio.cards.collection import DOCS_CARDS, load_folder, machine_name
from studio.engine.first_call import notable

if TYPE_CHECKING:
    from studio.engine import Studio
    from studio.request import GenerationRequest


def from_cards(cards: list[dict[str, Any]], model: str, config: str) -> list[dict[str, Any]]:
    """The first calls `cards` measured for `config` on `model`, slowest first: {machine, seconds, later (a
    later call's seconds per image), width, height, steps} (what Generate says of a configuration this studio
    has not run yet)."""
    found = []
    for card in cards:
        for entry in card.get("models") or []:
            if entry.get("model") != model:
                continue
            for row in [*(entry.get("rows") or []), *(entry.get("winners") or [])]:
                if row.get("config") == config and row.get("first_call_s") is not None:
                    found.append(
                        {
                            "machine": machine_name(card),
                            "seconds": row["first_call_s"],
                            "later": row.get("seconds_per_image"),
                            **{k: entry.get(k) for k in ("width", "height", "steps")},
                        }
                    )
    unique = {(f["machine"], f["width"], f["height"], f["steps"]): f for f in found}
    return sorted(unique.values(), key=lambda f: -f["seconds"])


def sentence(studio: Studio, request: GenerationRequest) -> str:
    """The sentence for `request`, or "" when nothing worth saying was measured."""
    found = studio.first_call(request)
    if found is not None:
        return found.sentence() if found.notable else ""
    elsewhere = from_cards(
        load_folder(default_folder(), DOCS_CARDS).cards, request.model, request.config_label
    )
    if not elsewhere or not notable(elsewhere[0]["seconds"], elsewhere[0]["later"]):
        return ""
    f = elsewhere[0]
    return (
        f"Not run here yet. A benchmark card measured the first call of {request.config_label} at "
        f"{report.seconds(f['seconds'])} ({f['width']}x{f['height']}, {f['steps']} steps) on {f['machine']}."
    )
