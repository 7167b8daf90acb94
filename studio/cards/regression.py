"""Did an upgrade make it slower? Two cards of one machine, side by side: per model, shape and configuration
that both measured, the change in seconds per image with a verdict, the libraries that differ between them,
and the caveat that the two were measured apart.

A verdict is "slower" or "faster" only when the change is larger than both cards' spreads for that row (the
max - min of its timed calls, per image); otherwise "within noise", and "no range" when either card kept no
spread (one timed call, or a transcribed card). Cards of two machines (another fingerprint) or of two suite
versions are refused with a sentence: their rows measure different things.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from studio.cards import wording
from studio.cards.collection import load_folder, machine_name
from studio.cards.machine import ABSENT, SPEED_LIBRARIES
from studio.errors import ValidationError
from studio.measure import protocol

VERDICTS = ("slower", "faster", "within noise", "no range")
CAVEAT = (
    "The two cards were measured apart, not in interleaved rounds: whatever changed on the host between them "
    "(other processes, another VM on the same host, thermal state) moves their rows too. A verdict beyond "
    "both ranges is worth confirming with one Compare run of the configurations in question."
)


def _label(card: dict[str, Any]) -> str:
    return Path(card.get("path") or "").name or card.get("created_at") or "a card"


def check_comparable(old: dict[str, Any], new: dict[str, Any]) -> None:
    """Refuse two cards whose rows do not compare: another machine or another suite version.

    Raises:
        ValidationError: naming both cards and what differs.
    """
    a, b = _label(old), _label(new)
    if old["system"].get("fingerprint") != new["system"].get("fingerprint"):
        raise ValidationError(
            f"{a} and {b} measured different machines ({machine_name(old)}; {machine_name(new)}): a "
            "regression report compares two cards of one machine. `python -m studio cards --machines` "
            "puts machines side by side."
        )
    if old.get("suite") != new.get("suite"):
        raise ValidationError(
            f"{a} was measured with suite version {old.get('suite') or 'none (transcribed)'} and {b} with "
            f"{new.get('suite') or 'none (transcribed)'}: cards compare only within one suite version. "
            "Measure both with the same studio's `python -m studio cards`."
        )


def _key(entry: dict[str, Any]) -> tuple:
    return tuple(entry.get(k) for k in ("model", "width", "height", "steps", "guidance", "batch", "device"))


def _figures(row: dict[str, Any]) -> dict[str, Any]:
    """A row's seconds per image and its spread per image (None without two timed calls)."""
    seconds = row.get("seconds_per_image")
    spread = row.get("latency_spread_s")
    timed = row.get("rounds") or 0
    per_image = None if spread is None or timed < 2 else spread / (row.get("batch") or 1)
    return {"seconds_per_image": seconds, "spread_s": None if per_image is None else round(per_image, 4)}


def verdict(before: dict[str, Any], after: dict[str, Any]) -> str:
    """'slower' or 'faster' when the change is beyond both spreads, else 'within noise'; 'no range' when
    either side has none (`before`, `after`: `_figures` of one row): `protocol.apart`, as the run log's
    timeline judges versions."""
    return protocol.apart(
        before["seconds_per_image"], before["spread_s"], after["seconds_per_image"], after["spread_s"]
    )


def _rows(entry: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        r["config"]: r
        for r in entry.get("rows") or []
        if r.get("status", "ok") == "ok" and r.get("seconds_per_image") is not None
    }


def _compare_entry(old: dict[str, Any], new: dict[str, Any]) -> tuple[list[dict[str, Any]], list[str]]:
    """Each configuration both entries measured (the old entry's order), and those only one did."""
    before, after = _rows(old), _rows(new)
    found = []
    for config in [c for c in before if c in after]:
        was, now = _figures(before[config]), _figures(after[config])
        change = now["seconds_per_image"] - was["seconds_per_image"]
        found.append(
            {
                "model": new["model"],
                "shape": wording.shape(new),
                "config": config,
                "before": was,
                "after": now,
                "change_s": round(change, 4),
                "change_pct": round(100 * change / was["seconds_per_image"], 1),
                "verdict": verdict(was, now),
            }
        )
    alone = [f"{wording.shape(new)}: {c}" for c in [*before, *after] if (c in before) != (c in after)]
    return found, alone


def version_changes(old: dict[str, Any], new: dict[str, Any]) -> list[dict[str, Any]]:
    """Every library either card records (the speed libraries first), with `changed` where they differ; a
    library a card does not record reads as None, one it records absent as 'not installed'."""
    a, b = old["system"].get("versions") or {}, new["system"].get("versions") or {}
    names = [*SPEED_LIBRARIES, *sorted((set(a) | set(b)) - set(SPEED_LIBRARIES))]
    return [
        {"library": n, "before": a.get(n), "after": b.get(n), "changed": a.get(n) != b.get(n)}
        for n in names
        if n in a or n in b
    ]


def _host(card: dict[str, Any]) -> dict[str, Any]:
    """A card's worst host noise over its models, and a sentence for it."""
    hosts = [e.get("host") or {} for e in card["models"]]
    busy = [h["busy_pct"] for h in hosts if h.get("busy_pct") is not None]
    steal = [h["steal_pct"] for h in hosts if h.get("steal_pct") is not None]
    worst = {"busy": any(h.get("busy") for h in hosts), "busy_pct": max(busy, default=None)}
    worst["steal_pct"] = max(steal, default=None)
    if worst["busy_pct"] is None:
        note = "host noise not recorded"
    else:
        state = "busy: its figures are unreliable" if worst["busy"] else "quiet"
        steal = f"steal {worst['steal_pct'] or 0:g}%"
        note = f"{state} (other processes {worst['busy_pct']:g}% of the CPU, {steal})"
    return {**worst, "note": note}


def _side(card: dict[str, Any]) -> dict[str, Any]:
    return {
        "card": _label(card),
        "path": card.get("path"),
        "created_at": card.get("created_at"),
        "source": card.get("source"),
        "host": _host(card),
    }


def compare(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """The regression report between two cards of one machine (`check_comparable` first).

    Args:
        old: the earlier card (`studio.cards.collection.load_card`).
        new: the later one.

    Returns:
        `machine`, `fingerprint`, `suite`, `before` and `after` (each card's name, date, source and host
        noise), `versions` (`version_changes`), `rows` (per configuration both measured: `before` and
        `after` seconds per image with spreads, `change_s`, `change_pct`, `verdict`), `only_one`
        (configurations one card measured), `counts` per verdict and the `caveat`.
    """
    check_comparable(old, new)
    earlier = {_key(e): e for e in old["models"]}
    rows: list[dict[str, Any]] = []
    only_one: list[str] = []
    for entry in new["models"]:
        if _key(entry) in earlier:
            found, alone = _compare_entry(earlier[_key(entry)], entry)
            rows += found
            only_one += alone
    later = {_key(e) for e in new["models"]}
    only_one += [wording.shape(e) for e in new["models"] if _key(e) not in earlier]
    only_one += [wording.shape(e) for e in old["models"] if _key(e) not in later]
    return {
        "machine": machine_name(new),
        "fingerprint": new["system"].get("fingerprint"),
        "suite": new.get("suite"),
        "before": _side(old),
        "after": _side(new),
        "versions": version_changes(old, new),
        "rows": rows,
        "only_one": only_one,
        "counts": {v: sum(r["verdict"] == v for r in rows) for v in VERDICTS},
        "caveat": CAVEAT,
    }


def _version(value: str | None) -> str:
    return "–" if value is None else ("absent" if value == ABSENT else value)


def _seconds(side: dict[str, Any]) -> str:
    spread = "" if side["spread_s"] is None else f" ±{wording.seconds(side['spread_s'])}"
    return f"{wording.seconds(side['seconds_per_image'])} s{spread}"


def markdown(report: dict[str, Any]) -> str:
    """The report as one Markdown block to paste into an issue: the machine, both cards, the libraries
    (changed ones in bold), a row per configuration with its verdict, the host noise and the caveat."""
    before, after = report["before"], report["after"]
    changed = [v["library"] for v in report["versions"] if v["changed"]]
    counts = ", ".join(f"{n} {v}" for v, n in report["counts"].items() if n) or "no configuration in both"
    lines = [
        f"### Speed before and after: {report['machine']}",
        "",
        f"Two cards of this machine (fingerprint `{report['fingerprint']}`, suite "
        f"{report['suite'] or '–'}): before `{before['card']}` ({before['created_at'] or 'undated'}), after "
        f"`{after['card']}` ({after['created_at'] or 'undated'}). Verdicts: {counts}.",
        "",
        "| library | before | after |",
        "|---|---|---|",
    ]
    for v in report["versions"]:
        mark = "**" if v["changed"] else ""
        lines.append(
            f"| {mark}{v['library']}{mark} | {_version(v['before'])} | {mark}{_version(v['after'])}{mark} |"
        )
    lines += [
        "",
        f"Changed: {', '.join(changed) or 'none'}.",
        "",
        "| model | configuration | before, s / image | after, s / image | change | verdict |",
        "|---|---|---|---|---|---|",
    ]
    for r in report["rows"]:
        cells = [
            r["shape"],
            f"`{r['config']}`",
            _seconds(r["before"]),
            _seconds(r["after"]),
            f"{r['change_s']:+.3f} s ({r['change_pct']:+.1f}%)",
            f"**{r['verdict']}**" if r["verdict"] in ("slower", "faster") else r["verdict"],
        ]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    if report["only_one"]:
        lines += ["", f"Measured by one card only: {'; '.join(report['only_one'])}."]
    lines += [
        "",
        f"Host while measured: before {before['host']['note']}; after {after['host']['note']}.",
        "",
        f"{report['caveat']} Spreads (±) are each row's max - min over its timed calls; a verdict needs the "
        "change beyond both.",
    ]
    return "\n".join(lines)


def newest_of_this_machine(folder: str | Path, fingerprint: str) -> dict[str, Any]:
    """The newest card in `folder` measured on the machine with `fingerprint`.

    Raises:
        ValidationError: there is none.
    """
    mine = [c for c in load_folder(folder).cards if c["system"].get("fingerprint") == fingerprint]
    if not mine:
        raise ValidationError(
            f"No card of this machine in {folder} to compare against: run `python -m studio cards` "
            "once first, or name a card with --against CARD."
        )
    return max(mine, key=lambda c: c.get("created_at") or "")
