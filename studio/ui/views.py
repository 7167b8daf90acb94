"""What each tab shows, built from the shared records (`studio.report`): words, rounded numbers with units,
tables that fit 1280 px, details one click away, nothing shown before there are results."""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Callable
from typing import Any

import gradio as gr
import pandas as pd
from pandas.io.formats.style import Styler
from PIL import Image

from studio import report
from studio.sweeps import autotune as autotune_mod
from studio.sweeps import ladder as ladder_mod
from studio.ui import exports

MEMORY_NOTE = {
    "cpu_rss": "peak memory is the process's peak resident set (RSS), which resolves about "
    f"{report.MEMORY_RESOLUTION_MB['cpu_rss']:.0f} MB",
    "cuda_allocated": "peak memory is the CUDA allocator's peak, exact to the byte",
}
DETAILS = (
    ("Configuration", "config"),
    ("First call", "first_call_s"),
    ("Pays off after (images)", "pays_off_after"),
    ("Recompiles", "recompiles"),
    ("PSNR (dB)", "psnr_db"),
    ("SSIM", "ssim"),
    ("Prompt fidelity", "fidelity"),
    ("Host busy (%)", "host_busy_pct"),
    ("Run", "run_id"),
)


RUN_MEMORY_NOTE = (
    "This run: its pipeline's weights on the device plus what its call added (activations). The process's "
    "peak also counts every other pipeline the process keeps loaded"
)
BREAKABLE = ("Configuration", "Speedup")  # columns (by how their titles start) that wrap where they may


def named(fn: Callable, components: dict[str, Any]) -> Callable:
    """`fn`, which returns its outputs by name, as an event function returning Gradio's `{component: value}`
    (`components`: the names' components, the event's outputs); a name left out leaves its component as it
    is. Gradio reads the parameters (a `gr.Request`, a `gr.Progress`) from `fn`'s own signature: a function's
    or a bound method's (without `self`)."""

    @functools.wraps(fn, updated=())
    def by_component(*args, **kwargs):
        return {components[name]: value for name, value in fn(*args, **kwargs).items()}

    by_component.__signature__ = inspect.signature(fn)

    return by_component


def filling(fn: Callable, components: dict[str, Any]) -> dict[str, Any]:
    """An event's `fn` and `outputs` for `fn`, which returns its outputs by name (`named`): each component
    listed once, `event(**filling(fn, components), inputs=...)`."""
    return {"fn": named(fn, components), "outputs": list(components.values())}


def refused_card(why: str) -> str:
    """The card of a run refused before it started (a bad value, techniques that cannot combine, a run that
    would not fit): the reason where the last run's card was."""
    return f"⚠ **Not run:** {why}"


def batch_image(images: list[Image.Image]) -> Image.Image:
    """Generate's image: the image itself, or a batch side by side (up to 4 per row) carrying the first
    image's settings (Gradio copies an image's text into the PNG it serves)."""
    if len(images) == 1:
        return images[0]
    columns = min(4, len(images))
    width, height = images[0].size
    rows = -(-len(images) // columns)
    sheet = Image.new("RGB", (columns * width + (columns - 1) * 4, rows * height + (rows - 1) * 4), "white")
    for i, image in enumerate(images):
        sheet.paste(image, ((i % columns) * (width + 4), (i // columns) * (height + 4)))
    sheet.info.update({k: v for k, v in images[0].info.items() if isinstance(v, str)})
    return sheet


def _switch(m: dict[str, Any]) -> str:
    """What putting the LoRAs on the pipeline cost, said after them ('' when they were on it already)."""
    return "" if m.get("lora_switch_s") is None else f" · put on in {report.seconds(m['lora_switch_s'])}"


def generate_card(m: dict[str, Any], note: str | None = None) -> str:
    """The metrics card under Generate's image; `note` first (what the model's images are, for a model whose
    weights are random)."""
    fidelity = "" if m["fidelity"] is None else f" · prompt fidelity **{m['fidelity']:.0%}**"
    if m.get("prompt_score") is not None and (m.get("prompt_score_by") or "").startswith("clip:"):
        fidelity += f" · CLIP prompt score **{m['prompt_score']:.1f}**"
    known = m["first_call_s"] is not None or m.get("first_call_phase")
    first = f" · first call {report.first_call(m)}" if known else ""
    if m["batch"] == 1:
        speed = f"**{report.seconds(m['latency_s'])}** per image"
    else:
        speed = (
            f"**{report.seconds(m['latency_s'])}** per call of {m['batch']} images · "
            f"**{report.seconds(m['seconds_per_image'])}** per image · {m['images_per_s']:.2f} images/s"
        )
    estimate = m.get("memory_estimate") or {}
    estimated = f" (estimated {estimate['peak']:,} MB)" if estimate.get("known") else ""
    total, _, parts = report.run_memory(m).partition(" (")
    mine = f"**{total}**" + (f" ({parts}" if parts else "")
    lines = [
        *([note] if note else []),
        f"{speed} · {m['steps_per_s']:.1f} steps/s{fidelity}",
        f"Memory: this run {mine} · the process's peak {report.memory(m)}{estimated}",
        *([f"LoRAs: `{report.lora_tags(m['loras'])}`{_switch(m)}"] if m.get("loras") else []),
        f"Applied: `{', '.join(m['applied']) or 'baseline'}` · run #{m['run_id']} on {m['device']}"
        + (f" ({m['cpu_threads']} CPU thread{'s' * (m['cpu_threads'] > 1)})" if m.get("cpu_threads") else "")
        + f", seed {m['seed']}"
        f" · load {report.seconds(m['load_s'])}{first}",
        f"<small>{'; '.join(filter(None, (RUN_MEMORY_NOTE, MEMORY_NOTE.get(m['memory_kind']))))}.</small>",
    ]
    if m.get("device_map"):
        lines.append(f"Device map: `{', '.join(f'{k} → {v}' for k, v in m['device_map'].items())}`")
    if m.get("host_busy"):
        lines.append(
            f"⚠ The host was busy (other processes {m['host_busy_pct']:.0f}% of the CPU): "
            "this time is unreliable."
        )
    lines += [f"⚠ {w}" for w in m.get("warnings") or () if "host was busy" not in w]
    return "  \n".join(lines)


def headline(records: list[dict[str, Any]]) -> str:
    """A sweep's paragraphs over its tables: what was measured, what won, what Latency and Speedup are, rows
    whose two figures disagree, and the busy-host warning when there is one."""
    ok = [r for r in records if r["status"] == "ok"]
    faster = [report.point_name(r) for r in ok if r["verdict"] == "faster"]
    xs = {r["x"] for r in ok if r.get("x") is not None}
    compared = {r["config"] for r in ok if r["verdict"] != "baseline"}
    plural = "s" * (len(compared) != 1)
    what = f"{len(compared)} configuration{plural}"
    if xs:
        what = f"{len(compared)} configuration{plural}, each at {len(xs)} {ok[0]['axis']} values,"
    rounds = report.notes.sweep_rounds(records)
    text = f"{what} timed in interleaved rounds against the baseline ({rounds} round{'s' * (rounds != 1)}). "
    text += (
        f"Faster beyond noise: **{', '.join(faster)}**."
        if faster
        else "Nothing was faster than the baseline beyond noise."
    )
    text += f"\n\n<small>{report.figures_legend(records)}"
    kind = next((r["memory_kind"] for r in ok if r.get("memory_kind")), None)
    if kind:
        note = MEMORY_NOTE[kind]
        text += f" {note[0].upper()}{note[1:]}; smaller differences read 'no measurable difference'."
    text += "</small>"
    return "\n\n".join([text, *report.disagreements(records), *report.table_notes(records)])


def _cell(value: Any, wrap: bool = False) -> str:
    """A value as a table shows it: '–' when missing, a whole float without its '.0' (a run id a row without
    one turned into floats), a configuration or a range `report.breakable` when `wrap`."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return report.breakable(str(value)) if wrap else str(value)


def styled(table: pd.DataFrame) -> Styler:
    """A table as the browser shows it: configurations break after a '+' and speedup ranges stay whole when a
    column is narrow (display only: the values clients read are unchanged)."""
    wrap = [c for c in table.columns if str(c).startswith(BREAKABLE)]
    return table.style.format(_cell).format(lambda v: _cell(v, wrap=True), subset=wrap)


def sweep_table(records: list[dict[str, Any]], first: tuple = ()) -> Styler:
    """A sweep's rows (`report.readable_rows`), the Speedup column titled with the rounds behind it."""
    table = pd.DataFrame(report.readable_rows(records, first))
    return styled(table.rename(columns={report.notes.SPEEDUP: report.speedup_title(records)}))


def ladder_table(records: list[dict[str, Any]]) -> Styler:
    """The Ladder's rows: its step first, then the sweep's columns."""
    return sweep_table(records, ladder_mod.STEP_COLUMN)


def details_table(records: list[dict[str, Any]]) -> Styler:
    def cell(r: dict[str, Any], key: str) -> Any:
        value = r.get(key)
        if key == "first_call_s":
            return report.first_call(r)
        if key == "fidelity" and value is not None:
            return f"{value:.0%}"
        return "–" if value is None else value

    return styled(pd.DataFrame([{title: cell(r, key) for title, key in DETAILS} for r in records]))


def latency_bars(bars: list[tuple[str, float]], most: int = 12) -> Any:
    """Compare's bar chart of (configuration, latency) in the table's order (Gradio sorts a bar chart's
    categories by name unless told the order); hidden past `most` bars, whose names no longer fit under them
    (the table and an X/Y sweep's heat maps say the same)."""
    frame = pd.DataFrame([{"configuration": c, "latency (s)": s} for c, s in bars])
    return gr.update(value=frame, sort=[c for c, _ in bars], visible=len(bars) <= most)


def no_xy() -> dict[str, Any]:
    """Compare's X/Y outputs, by name, for a sweep without an X axis: the X/Y column and its two plots
    hidden, the grid and heat maps empty."""
    return {
        "xy_results": gr.update(visible=False),
        "grid": None,
        "speedup_map": None,
        "psnr_map": None,
        "throughput": gr.update(visible=False),
        "peak_memory": gr.update(visible=False),
    }


def compare_outputs(result) -> dict[str, Any]:
    """Compare's outputs by name: results column shown, headline, gallery, tables, chart, slider (and the
    pairs it picks from), files, the X/Y outputs hidden, raw rows."""
    records = result.records
    ok = [(r, res) for r, res in zip(records, result.results, strict=True) if res is not None]
    choices = [r["config"] for r, _ in ok[1:]]
    base = ok[0][1].images[0] if ok else None
    pairs = {r["config"]: (base, res.images[0]) for r, res in ok[1:]}  # the slider's choice -> its two images
    return {
        "results": gr.update(visible=True),
        "headline": headline(records),
        "gallery": [(res.images[0], report.caption(r)) for r, res in ok],
        "table": sweep_table(records),
        "details": details_table(records),
        "latency_chart": latency_bars([(r["config"], r["latency_s"]) for r, _ in ok]),
        "slider_choice": gr.update(choices=choices, value=choices[0] if choices else None),
        "slider": pairs[choices[0]] if choices else None,
        "pairs": pairs,
        "csv": exports.csv_file(records, "compare.csv"),
        "markdown": exports.markdown_file(records, "compare.md"),
        **no_xy(),
        "rows": records,
    }


def ladder_outputs(records: list[dict[str, Any]]) -> dict[str, Any]:
    """The Ladder's outputs by name: results shown, its headline, its table and the raw rows."""
    shown = {"headline": headline(records), "table": ladder_table(records), "rows": records}
    return {"results": gr.update(visible=True), **shown}


MEMORY_TITLE = "Latency (s) vs peak memory (MB, from zero)"


def tune_points(rows: list[dict[str, Any]]) -> pd.DataFrame | None:
    """Auto-tune's plot points (PSNR capped at 100 dB, an identical image's), None without any row."""
    if not rows:
        return None
    return pd.DataFrame(
        [
            {
                "config": r["config"],
                "latency_s": r["latency_s"],
                "psnr_db": min(r["psnr_db"] or 100.0, 100.0),
                "peak_memory_mb": r["peak_memory_mb"],
            }
            for r in rows
        ]
    )


def memory_plot(points: pd.DataFrame | None, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Auto-tune's latency-against-memory plot, its memory axis from zero to a little above the highest
    point (a spread of a few MB does not fill it), and when every point lies within what the memory probe
    resolves (`rows`' kind), a title that says the memory is the same within that."""
    kind = next((r["memory_kind"] for r in rows if r.get("memory_kind")), None)
    memory = points["peak_memory_mb"].dropna() if points is not None else pd.Series(dtype=float)
    if kind is None or memory.empty:
        return gr.update(value=points, title=MEMORY_TITLE)
    resolves = report.MEMORY_RESOLUTION_MB[kind]
    low, high = float(memory.min()), float(memory.max())
    top = [0, round(high * 1.15 + 1)]
    if high - low >= resolves:
        return gr.update(value=points, title=MEMORY_TITLE, y_lim=top)
    probe = "RSS" if kind == "cpu_rss" else "the CUDA allocator"
    span = f"{low:.0f} MB" if round(low) == round(high) else f"{low:.0f}–{high:.0f} MB"
    said = f"Peak memory: the same within the {resolves:.0f} MB {probe} resolves ({span})"
    return gr.update(value=points, title=said, y_lim=top)


def autotune_outputs(result) -> dict[str, Any]:
    """Auto-tune's outputs by name: results shown, its summary, every configuration measured, latency
    against quality and against memory, the result as the API returns it, the winner and its Apply button."""
    rows = result.rows
    points = tune_points([r for r in rows if r["status"] == "ok"])
    table = pd.DataFrame(report.readable_rows(rows, (("Stage", lambda r: r.get("stage", "")),)))
    table = table.drop(columns=["Peak memory"])  # in the plot beside; seven columns fit 1280 px
    table["Quality floor"] = [
        ("met" if r.get("meets_floor") else r.get("floor") or r["status"]) for r in rows
    ]
    data = autotune_mod.as_json(result)
    winner = data["winner"]
    label = f"Apply {result.winner_label} in Generate" if winner else "Nothing to apply: keep the baseline"
    note = report.host_note(rows)
    return {
        "results": gr.update(visible=True),
        "summary": autotune_mod.summary(result) + (f"\n\n{note}" if note else ""),
        "table": styled(table),
        "quality_plot": points,
        "memory_plot": memory_plot(points, rows),
        "result": data,
        "winner": winner,
        "apply": gr.update(interactive=winner is not None, value=label),
    }


def history_outputs(records: list[dict[str, Any]], csv_path: str, prompts: list[str]) -> dict[str, Any]:
    """History's `table` (a run's prompt as `prompts` gives it, its status, and a sweep's verdict where there
    is one), `plot` and `csv`."""
    first = (
        ("Run", lambda r: r["run_id"]),
        ("When", lambda r: (r["created_at"] or "")[5:19].replace("T", " ")),
        ("Model", lambda r: r["model"]),
    )
    table = pd.DataFrame(report.readable_rows(records, first))
    table = table.drop(columns=["Image vs baseline", "Peak memory"], errors="ignore")  # in the CSV
    if records:  # a run's status in its own column; a verdict only where a sweep gave one
        table.insert(table.columns.get_loc("Configuration"), "Prompt", prompts)
        table.insert(table.columns.get_loc("Verdict"), "Status", [r["status"] for r in records])
        table["Verdict"] = [r.get("verdict") or "–" for r in records]
    ok = [r for r in records if r["status"] == "ok" and r["latency_s"] is not None]
    times = pd.to_datetime([r["created_at"] for r in ok], utc=True)
    latency, config = [r["latency_s"] for r in ok], [r["config"] for r in ok]
    plot = pd.DataFrame({"time": times, "latency (s)": latency, "configuration": config})
    when = ["When"] if records else []  # the time on one line: the prompt and configuration wrap instead
    table = styled(table).format(lambda v: str(v).replace(" ", "\u00a0"), subset=when)
    return {"table": table, "plot": gr.update(value=plot, x_axis_format=time_format(times)), "csv": csv_path}


def time_format(times: pd.DatetimeIndex) -> str:
    """Tick labels that tell the points apart: seconds within an hour, hours within days, dates beyond."""
    span = (times.max() - times.min()).total_seconds() if len(times) > 1 else 0
    return "%H:%M:%S" if span < 3600 else "%d %b %H:%M" if span < 3 * 86400 else "%d %b"


def kept_builds_words(kept: dict[str, int]) -> str:
    """What the loaded pipelines keep of what techniques built, and the bound, in words."""
    configurations = kept["configurations"]
    kept_now = f"{configurations} configuration{'s' if configurations != 1 else ''}"
    return (
        f"{kept_now} (traces, compiled graphs, conversions) kept for their next apply; at most "
        f"{kept['per_pipeline']} per loaded pipeline, the oldest released first (`STUDIO_KEPT_BUILDS`)"
    )


def system_tables(data: dict[str, Any]) -> tuple[str, pd.DataFrame]:
    """System as short text and tables: devices and libraries, then every technique with why it cannot run."""
    machine = report.machine_rows(data["hardware"], data["versions"])
    lines = [
        "| This machine | |",
        "|---|---|",
        *(f"| {label} | {value} |" for label, value in machine),
        f"| Loaded pipelines | {len(data['loaded_pipelines'])} |",
        f"| Kept builds | {kept_builds_words(data['kept_builds'])} |",
        f"| Runs and images kept | {data['retention'][:1].upper()}{data['retention'][1:]} |",
        f"| Run log | `{data['database']}` |",
    ]
    techniques = pd.DataFrame(
        [
            {
                "Technique": t["name"],
                "Group": t["group"],
                "Here": "available" if t["unavailable"] is None else t["unavailable"],
            }
            for t in data["techniques"]
        ]
    )
    return "\n".join(lines), techniques
