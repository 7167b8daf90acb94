"""What the first call of a configuration costs, said before it runs, for every face (Generate's note,
`/estimate`, `python -m studio estimate`): the first calls this studio logged (`studio.engine.first_call`),
else the slowest a benchmark card measured (this studio's cards and docs/cards), with its machine; said only
where the first call costs clearly more than a later one. A combination measured nowhere is estimated from
its parts: what each technique's own first call costs beyond a later call, here or on a card's machine."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from studio import report
from studio.cards.card import default_folder
from studio.cards.collection import DOCS_CARDS, load_folder, machine_name
from studio.engine.first_call import notable, part_of

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


def _from_card(cards: list[dict[str, Any]], request: GenerationRequest) -> dict[str, Any] | None:
    """The slowest first call a card measured for `request`'s configuration, or None."""
    found = from_cards(cards, request.model, request.config_label)
    return found[0] if found else None


def _part(
    studio: Studio, cards: list[dict[str, Any]], request: GenerationRequest, name: str
) -> tuple[str, float | None, bool]:
    """Technique `name` alone: a phrase on what its first call costs beyond a later one, here (the run log)
    or else on a card's machine; those seconds (None where unknown); whether they are only a bound (the whole
    first call, where no later call was logged)."""
    alone = part_of(request, name)
    label = alone.config_label
    here = studio.first_call(alone)
    if here is not None and here.one_off_s is None:
        return f"{label} took {report.seconds(here.cold_s)} (here; no later call logged)", here.cold_s, True
    card = _from_card(cards, alone) if here is None else None
    if here is None and card is None:
        return f"{label} was not measured", None, False
    if here is not None:
        more, where, big = here.one_off_s, "here", here.notable
    else:
        more = max(0.0, card["seconds"] - (card["later"] or 0.0))
        where, big = f"on {card['machine']}, a benchmark card", notable(card["seconds"], card["later"])
    cost = f"{report.seconds(more)} more than a later call" if big else "no more than a later call"
    return f"{label} costs {cost} ({where})", more, False


def from_parts(studio: Studio, cards: list[dict[str, Any]], request: GenerationRequest) -> str:
    """For a combination measured neither here nor on a card: each technique's own first call, as an
    estimate from its parts (or that none of them was measured)."""
    parts = [_part(studio, cards, request, name) for name in request.opts]
    known = [more for _, more, _ in parts if more is not None]
    if not known:
        return (
            f"Not run here yet as {request.config_label}, and none of its techniques was measured alone "
            "(here or on a benchmark card): what its first call costs is not known."
        )
    left = [name for name, (_, more, _) in zip(request.opts, parts, strict=True) if more is None]
    without = f", not counting {' or '.join(left)}" if left else ""
    bound = "up to" if any(upper for *_, upper in parts) else "about"
    return (
        f"Not run here yet as {request.config_label}. Estimated from its parts, each technique's first call "
        f"alone: {'; '.join(p for p, *_ in parts)}. Together: {bound} {report.seconds(sum(known))} more "
        f"than a later call{without}."
    )


def sentence(studio: Studio, request: GenerationRequest) -> str:
    """The sentence for `request`, or "" when nothing worth saying was measured: its own first calls here,
    else a card's, else (a combination) an estimate from its parts."""
    found = studio.first_call(request)
    if found is not None:
        return found.sentence() if found.notable else ""
    cards = load_folder(default_folder(), DOCS_CARDS).cards
    f = _from_card(cards, request)
    if f is None:
        return from_parts(studio, cards, request) if len(request.opts) > 1 else ""
    if not notable(f["seconds"], f["later"]):
        return ""
    return (
        f"Not run here yet. A benchmark card measured the first call of {request.config_label} at "
        f"{report.seconds(f['seconds'])} ({f['width']}x{f['height']}, {f['steps']} steps) on {f['machine']}."
    )
