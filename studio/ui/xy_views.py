"""What Compare shows for an X/Y sweep: the image grid with its axes labelled (with a Y axis, a block of Y
rows per configuration), heat maps of speedup and of the image difference (each against the baseline at the
same X and Y), and for the batch axis throughput and peak memory against batch size."""

from __future__ import annotations

from typing import Any

import gradio as gr
import pandas as pd
from PIL import Image, ImageDraw, ImageFont

from studio import report
from studio.sweeps import xy
from studio.ui import exports, views

CELL = 160  # px per image in the grid (small models' 64 px images are scaled up, without smoothing)
LABEL_W, LABEL_H = 170, 28
GREEN, WHITE, RED = (46, 160, 67), (255, 255, 255), (214, 69, 65)


def grid_image(result: xy.XYResult) -> Image.Image:
    """One image per cell, rows = configurations (each at every Y value), columns = X values, all labelled;
    a line between configurations."""
    values, rows = result.axis.values, result.rows
    sheet = Image.new("RGB", (LABEL_W + CELL * len(values), LABEL_H + CELL * len(rows)), WHITE)
    draw = ImageDraw.Draw(sheet)
    font = ImageFont.load_default(size=15)
    for col, x in enumerate(values):
        draw.text((LABEL_W + col * CELL + 6, 6), result.axis.label(x)[:18], fill=(0, 0, 0), font=font)
    for row, (config, y) in enumerate(rows):
        top = LABEL_H + row * CELL
        if row and y == result.y_values[0]:  # a new configuration's block
            draw.line((0, top, sheet.width, top), fill=(120, 120, 120), width=2)
        lines = [config[:20]] if y is None else [config[:20], result.y_axis.label(y)[:20]]
        for i, line in enumerate(lines):
            draw.text((6, top + CELL // 2 - 8 * len(lines) + 18 * i), line, fill=(0, 0, 0), font=font)
        for col, x in enumerate(values):
            point = result.point(x, config, y)
            left = LABEL_W + col * CELL
            if point.result is None:
                draw.text((left + 6, top + CELL // 2 - 8), point.record["status"], fill=RED, font=font)
                continue
            image = point.result.images[0].convert("RGB")
            scale = min((CELL - 8) / image.width, (CELL - 8) / image.height)
            resample = Image.NEAREST if scale >= 1 else Image.LANCZOS
            image = image.resize((round(image.width * scale), round(image.height * scale)), resample)
            sheet.paste(image, (left + (CELL - image.width) // 2, top + (CELL - image.height) // 2))
    return sheet


def _shade(value: float | None, low: float, mid: float, high: float) -> str:
    """Green above `mid`, red below, white at `mid` (values clipped to [low, high])."""
    if value is None:
        return ""
    if value >= mid:
        t, colour = min(1.0, (value - mid) / max(high - mid, 1e-9)), GREEN
    else:
        t, colour = min(1.0, (mid - value) / max(mid - low, 1e-9)), RED
    rgb = [round(w + (c - w) * 0.55 * t) for w, c in zip(WHITE, colour, strict=True)]
    return f"background-color: rgb({rgb[0]}, {rgb[1]}, {rgb[2]})"


def heat_map(result: xy.XYResult, key: str) -> Any:
    """A table of words (speedup with range, or PSNR) coloured by the value: `speedup` or `psnr_db`."""
    cell = xy.speedup_text if key == "speedup" else xy.psnr_text
    columns = ["Configuration", *(result.axis.label(x) for x in result.axis.values)]
    frame = pd.DataFrame(xy.table(result, cell), columns=columns)
    values = [[result.point(x, c, y).record.get(key) for x in result.axis.values] for c, y in result.rows]
    if key == "speedup":
        colours = [[_shade(v, 0.5, 1.0, 2.0) for v in row] for row in values]
    else:  # identical (None) is as good as it gets; 20 dB and below is a different image
        colours = [[_shade(60.0 if v is None else v, 20.0, 30.0, 60.0) for v in row] for row in values]
    styles = pd.DataFrame([["", *row] for row in colours], columns=columns)
    return frame.style.apply(lambda _: styles, axis=None).format(report.breakable)


def throughput_frames(result: xy.XYResult) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Images per second and peak memory against the X value (batch size), one line per configuration (and
    Y value)."""
    ok = [(p, result.row_label(p.config, p.y)) for p in result.points if p.record["status"] == "ok"]
    speed = pd.DataFrame(
        [{"batch": p.x, "images/s": p.record["images_per_s"], "configuration": c} for p, c in ok]
    )
    memory = pd.DataFrame(
        [{"batch": p.x, "peak memory (MB)": p.record["peak_memory_mb"], "configuration": c} for p, c in ok]
    )
    return speed, memory


def headline(result: xy.XYResult) -> str:
    """What was compared (the configurations against the baseline, not counting it), at which X values,
    what was faster beyond noise, the figure that compares points across this axis (`xy.summary`), what the
    table's figures are, and the notes on disagreeing rows and a busy host."""
    records = result.records
    ok = [r for r in records if r["status"] == "ok"]
    compared = [
        c for c in result.configs[1:] if any(p.config == c and p.result is not None for p in result.points)
    ]
    rounds = report.notes.sweep_rounds(records)
    values, y_axis = result.axis.values, result.y_axis
    each = f"each of {len(values)} {result.axis.name} values ({', '.join(values)})"
    if y_axis is not None:
        each += f" × {len(y_axis.values)} {y_axis.name} values ({', '.join(y_axis.values)})"
    text = (
        f"**{len(compared)} configuration{'s' * (len(compared) != 1)}** ({', '.join(compared) or 'none'}) "
        f"against the baseline at {each}, timed in interleaved rounds ({rounds} round{'s' * (rounds != 1)}). "
    )
    same = result.axis.name if y_axis is None else f"{result.axis.name} and {y_axis.name}"
    faster = [report.point_name(r) for r in ok if r["verdict"] == "faster"]
    text += (
        f"Faster beyond noise than the baseline at the same {same}: **{', '.join(faster)}**."
        if faster
        else f"Nothing was faster beyond noise than the baseline at the same {same}."
    )
    kind = next((r["memory_kind"] for r in ok if r.get("memory_kind")), None)
    memory = f" {views.MEMORY_NOTE[kind][0].upper()}{views.MEMORY_NOTE[kind][1:]}." if kind else ""
    legend = f"<small>{report.figures_legend(records)}{memory}</small>"
    notes = [*report.disagreements(records), report.host_note(records)]
    return "\n\n".join([text, xy.summary(result), legend, *(n for n in notes if n)])


def where(result: xy.XYResult, point: xy.Point) -> str:
    """A point's place in the grid: 'steps=4', or 'seed=3, prompt=square' with a Y axis."""
    x = result.axis.label(point.x)
    return x if point.y is None else f"{x}, {result.y_axis.label(point.y)}"


def xy_outputs(result: xy.XYResult) -> dict[str, Any]:
    """Compare's outputs for an X/Y sweep, by name (those of `views.compare_outputs`): the usual ones (every
    point a row, the X first) and the grid's, heat maps and, for the batch axis, throughput and memory."""
    records = result.records
    ok = [p for p in result.points if p.result is not None]
    first = (("X", lambda r: r["x"]),) + ((("Y", lambda r: r["y"]),) if result.y_axis else ())
    gallery = [(p.result.images[0], f"{where(result, p)} · {report.caption(p.record)}") for p in ok]
    pairs = {
        f"{p.config} @ {where(result, p)}": (
            result.point(p.x, "baseline", p.y).result.images[0],
            p.result.images[0],
        )
        for p in ok
        if p.config != "baseline" and result.point(p.x, "baseline", p.y).result is not None
    }
    bars = views.latency_bars([(f"{p.config} @ {where(result, p)}", p.record["latency_s"]) for p in ok])
    batch = result.axis.name == "batch"
    speed, memory = throughput_frames(result) if batch else (None, None)
    return {
        "results": gr.update(visible=True),
        "headline": headline(result),
        "gallery": gallery,
        "table": views.sweep_table(records, first),
        "details": views.details_table(records),
        "latency_chart": bars,
        "slider_choice": gr.update(choices=list(pairs), value=next(iter(pairs), None)),
        "slider": next(iter(pairs.values()), None),
        "pairs": pairs,
        "csv": exports.csv_file(records, "xy.csv"),
        "markdown": exports.text_file(xy.markdown(result), "xy.md"),
        "xy_results": gr.update(visible=True),
        "grid": grid_image(result),
        "speedup_map": heat_map(result, "speedup"),
        "psnr_map": heat_map(result, "psnr_db"),
        "throughput": gr.update(value=speed, visible=batch),
        "peak_memory": gr.update(value=memory, visible=batch),
        "rows": records,
    }
