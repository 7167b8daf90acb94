"""A card's figures in words: the baseline, a winning configuration, a model's shape. The card summary, the
machines tables and docs/benchmarks.md's "What is fastest where" table all write them this way."""

from __future__ import annotations

from typing import Any

from studio.cards.picks import CHANGES, KEEPS
from studio.report.text import ratio as report_ratio


def number(value: float, most: int) -> str:
    """`value` with the fewest decimals (2 to `most`) that write it exactly: 3.77, 2.955, 28.10."""
    for digits in range(2, most + 1):
        if abs(round(value, digits) - value) < 1e-9:
            return f"{value:.{digits}f}"
    return f"{value:.{most}f}"


def seconds(value: float | None) -> str:
    """Seconds as the tables write them: two decimals from 10 s up, at most three below."""
    if value is None:
        return "–"
    return number(value, 2 if value >= 10 else 3)


def ratio(p: dict[str, Any]) -> str:
    """'×1.49 (1.48–1.56)', '×0.76' without a range (as `report.ratio` words it); '' without a speedup."""
    return report_ratio(p) if p.get("speedup") is not None else ""


def shape(entry: dict[str, Any]) -> str:
    """'sd15-arch 512x512, 50 steps, batch 1, guidance 7.5' (what the card does not know is left out)."""
    parts = [f"{entry['model']} {entry['width']}x{entry['height']}", f"{entry['steps']} steps"]
    if entry.get("batch") is not None:
        parts.append(f"batch {entry['batch']}")
    if entry.get("guidance") is not None:
        parts.append(f"guidance {entry['guidance']:g}")
    return ", ".join(parts)


def baseline(entry: dict[str, Any]) -> str:
    """'PyTorch fp32: 25.69 s'."""
    base = entry["baseline"]
    name = base.get("label") or f"`{base['config']}`"
    return f"{name}: {seconds(base.get('seconds_per_image'))} s"


def _quality(p: dict[str, Any], gpu: bool) -> list[str]:
    against = (p.get("against") or {}).get("config") or ("fp32" if gpu else None)
    parts = []
    if p.get("psnr_db") is not None:
        ssim = f", SSIM {p['ssim']:.3f}" if p.get("ssim") is not None else ""
        parts.append(f"{p['psnr_db']:.1f} dB{ssim}{f' vs {against}' if against else ''}")
    if p.get("reference_psnr_db") is not None:
        parts.append(f"{p['reference_psnr_db']:.1f} dB vs {p['reference']}")
    return parts


def pick(p: dict[str, Any], gpu: bool = False) -> str:
    """'`openvino`: 16.96 s, ×1.49 (1.48–1.56), 124.4 dB'; a pick slower than its baseline or within noise
    reads 'none faster: ...'; `gpu`: the figures are against fp32 unless the pick says otherwise."""
    name = f"`{p['config']}`" + (f" ({p['aside']})" if p.get("aside") else "")
    speed = ratio(p)
    against = p.get("against")
    if against and against.get("seconds_per_image") is not None:
        speed += f" against {against['config']} ({seconds(against['seconds_per_image'])} s)"
    figures = [f"{seconds(p['seconds_per_image'])} s"] if p.get("seconds_per_image") is not None else []
    figures += [f for f in (speed, *_quality(p, gpu)) if f]
    text = f"{name}: {', '.join(figures)}" + (f"; {p['note']}" if p.get("note") else "")
    if p.get("verdict") in ("slower", "within noise"):
        text = f"none faster: {text}"
    return f"{p['title']}: {text}" if p.get("title") else text


def picks_of(entry: dict[str, Any], kind: str, gpu: bool = False) -> str:
    """Every winner of `kind`, the first one first ('–' when there is none)."""
    mine = [p for p in entry.get("winners") or [] if p["kind"] == kind]
    return "; ".join(pick(p, gpu) for p in mine) or "–"


def first_of(entry: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next((p for p in entry.get("winners") or [] if p["kind"] == kind), None)


KIND_TITLES = {KEEPS: "best keeping the math", CHANGES: "best that changes the image"}
