"""What the first call of a configuration costs, said before it runs, for every face (Generate's note,
`/estimate`, `python -m studio estimate`): the first calls this studio logged (`studio.engine.first_call`),
else the slowest a machine's card measured (this studio's cards and docs/cards), with its machine; said only
where the first call costs clearly more than a later one. A combination measured nowhere is estimated from
its parts: what each technique's own first call costs beyond a later call, here or on a card's machine. A
configuration whose first call compiles or converts (`studio.phases.PREPARING`) and that was measured nowhere
gets an estimate from any card's configurations with that technique on the same model (`compile_cost`), which
also gives a first call's progress line its expected seconds (`expected_seconds`)."""

from __future__ import annotations

import statistics
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from studio import phases, report
from studio.cards.card import default_folder
from studio.cards.collection import DOCS_CARDS, load_folder, machine_name
from studio.engine.first_call import notable, part_of

if TYPE_CHECKING:
    from studio.engine import Studio
    from studio.request import GenerationRequest


def _first_calls(cards: list[dict[str, Any]], winners: bool = False) -> Iterator[dict[str, Any]]:
    """Every first call `cards` measured (their rows, and with `winners` their winners' too): {machine, model,
    config, seconds, later (a later call's seconds per image), width, height, steps}."""
    for card in cards:
        for entry in card.get("models") or []:
            rows = [*(entry.get("rows") or []), *((entry.get("winners") or []) if winners else [])]
            for row in rows:
                if row.get("first_call_s") is not None:
                    yield {
                        "machine": machine_name(card),
                        "model": entry.get("model"),
                        "config": row.get("config"),
                        "seconds": row["first_call_s"],
                        "later": row.get("seconds_per_image"),
                        **{k: entry.get(k) for k in ("width", "height", "steps")},
                    }


def from_cards(cards: list[dict[str, Any]], model: str, config: str) -> list[dict[str, Any]]:
    """The first calls `cards` measured for `config` on `model`, slowest first (what Generate says of a
    configuration this studio has not run yet)."""
    found = [f for f in _first_calls(cards, winners=True) if f["model"] == model and f["config"] == config]
    unique = {(f["machine"], f["width"], f["height"], f["steps"]): f for f in found}
    return sorted(unique.values(), key=lambda f: -f["seconds"])


def with_technique(cards: list[dict[str, Any]], technique: str) -> list[dict[str, Any]]:
    """Every first call `cards` measured of a configuration that uses `technique`, on any model."""
    from studio.request.configs import parse_config

    return [f for f in _first_calls(cards) if technique in parse_config(f["config"])[0]]


def compile_cost(cards: list[dict[str, Any]], request: GenerationRequest) -> tuple[str, float | None] | None:
    """For a configuration whose first call prepares something (compiles, converts) and that was measured
    nowhere: a sentence from the cards' first calls of configurations with the same technique, and the seconds
    to expect (their median on this model; None where only other models were measured). None when no
    technique of the request prepares anything."""
    name = next((n for n in request.optimizations if n in phases.PREPARING), None)
    if name is None:
        return None
    measured = with_technique(cards, name)
    here = sorted((f for f in measured if f["model"] == request.model), key=lambda f: f["seconds"])
    if here:
        expect = statistics.median(f["seconds"] for f in here)
        each = ", ".join(f"{short(f['machine'])} {rough(f['seconds'])}" for f in here[:4])
        later = [f["later"] for f in here if f["later"]]
        after = f"; later calls {rough(min(later))}–{rough(max(later))}" if later else ""
        return (
            f"Not run here yet, and its first call {phases.PREPARING[name]}. On the machines' cards, first "
            f"calls with {name} on {request.model} took {rough(here[0]['seconds'])}–"
            f"{rough(here[-1]['seconds'])} ({each}){after}: expect about {rough(expect)} "
            "here, more or less with this CPU's speed.",
            expect,
        )
    if measured:
        other = max(measured, key=lambda f: f["seconds"])
        return (
            f"Not run here yet, and its first call {phases.PREPARING[name]}. No machine's card measured "
            f"{name} on {request.model}; on {other['model']} its first call took "
            f"{rough(other['seconds'])} ({short(other['machine'])}), and it grows with the model.",
            None,
        )
    return (
        f"Not run here yet, and its first call {phases.PREPARING[name]}: nothing measured how long that "
        "takes, here or on a machine's card.",
        None,
    )


def rough(seconds: float) -> str:
    """An estimate's seconds as a person reads one: '40 s', '0.14 s'."""
    return f"{seconds:.0f} s" if seconds >= 10 else report.seconds(seconds)


def short(machine: str) -> str:
    """A card's machine without its CPU details: 'Intel Xeon with AMX'."""
    return machine.split(" (")[0]


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
        where, big = f"on the card of {card['machine']}", notable(card["seconds"], card["later"])
    cost = f"{report.seconds(more)} more than a later call" if big else "no more than a later call"
    return f"{label} costs {cost} ({where})", more, False


def from_parts(studio: Studio, cards: list[dict[str, Any]], request: GenerationRequest) -> str:
    """For a combination measured neither here nor on a card: each technique's own first call, as an
    estimate from its parts (or that none of them was measured)."""
    parts = [_part(studio, cards, request, name) for name in request.optimizations]
    known = [more for _, more, _ in parts if more is not None]
    cost = None if known else compile_cost(cards, request)
    if cost is not None:  # a compile measured nowhere alone: the cards' compiles of the model
        return cost[0]
    if not known:
        return (
            f"Not run here yet as {request.config_label}, and none of its techniques was measured alone "
            "(here or on a machine's card): what its first call costs is not known."
        )
    left = [name for name, (_, more, _) in zip(request.optimizations, parts, strict=True) if more is None]
    without = f", not counting {' or '.join(left)}" if left else ""
    bound = "up to" if any(upper for *_, upper in parts) else "about"
    return (
        f"Not run here yet as {request.config_label}. Estimated from its parts, each technique's first call "
        f"alone: {'; '.join(p for p, *_ in parts)}. Together: {bound} {report.seconds(sum(known))} more "
        f"than a later call{without}."
    )


def measured(studio: Studio, request: GenerationRequest) -> tuple[str, float | None]:
    """What `request`'s first call costs, said and in seconds: its own first calls here, else a card's, else
    (a combination) an estimate from its parts, or a compile's from the cards (`compile_cost`). ("", None)
    when nothing worth saying was measured (a first call that costs no more than a later one)."""
    found = studio.first_call(request)
    if found is not None:
        return (found.sentence(), found.cold_s) if found.notable else ("", None)
    cards = load_folder(default_folder(), DOCS_CARDS).cards
    f = _from_card(cards, request)
    if f is None:
        cost = compile_cost(cards, request)
        seconds = cost[1] if cost is not None else None
        if len(request.optimizations) > 1:
            return from_parts(studio, cards, request), seconds
        return (cost[0], seconds) if cost is not None else ("", None)
    if not notable(f["seconds"], f["later"]):
        return "", None
    said = (
        f"Not run here yet. A machine's card measured the first call of {request.config_label} at "
        f"{report.seconds(f['seconds'])} ({f['width']}x{f['height']}, {f['steps']} steps) on {f['machine']}."
    )
    return said, f["seconds"]


def sentence(studio: Studio, request: GenerationRequest) -> str:
    """The sentence of `measured`, or "" (every face's note before a run)."""
    return measured(studio, request)[0]


def expected_seconds(studio: Studio, request: GenerationRequest) -> float | None:
    """The seconds of `measured`, or None: what a first call's progress line counts towards."""
    return measured(studio, request)[1]
