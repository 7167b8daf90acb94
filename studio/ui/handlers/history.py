"""History's handlers: `/history` (the run log, filtered, with its CSV; the tab's Refresh answers a bad filter
with a sentence instead), `/load_config` (a logged run back into Generate's form), a click on a History row
(the same, and Generate names the run it loaded), `/export_db`, and `/timeline` (did an upgrade make it
slower? one configuration's runs on this machine grouped by the library versions they ran under,
`studio.engine.speed_timeline`). The form's handlers return their outputs by name (`views.named`)."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gradio as gr
import pandas as pd

from studio import devices, report, visitors
from studio.engine import Studio, speed_timeline
from studio.errors import StudioError, describe
from studio.request import HistoryFilter, validate_run_id
from studio.ui import exports, views
from studio.ui.handlers.common import DEFAULT_MODEL, engine_errors
from studio.ui.handlers.generate import filled

TIMELINE_INPUTS = ("model", "config", "steps", "width", "height", "batch", "device")
TIMELINE = ("table", "plot", "markdown", "eras")  # what `/timeline` answers, in this order
ERA_COLUMNS = ("Era", "Runs", "When", "Versions", "s / image", "Host busy", "Against the era before")


def _when(era: speed_timeline.Era) -> str:
    first, last = (at[:16].replace("T", " ") for at in (era.first_at, era.last_at))
    return first if first == last else f"{first} – {last[11:] if last[:10] == first[:10] else last}"


def era_names(eras: list[speed_timeline.Era]) -> list[str]:
    """Each era as the plot's legend names it: its number and the versions of the libraries that change
    along the timeline ('2: torch 2.13.0')."""
    moved = [k for k in speed_timeline.TRACKED if any(k in era.changed for era in eras)]
    return [
        f"{i}: " + (", ".join(f"{k} {era.versions[k]}" for k in moved) or "one set of versions")
        for i, era in enumerate(eras, 1)
    ]


def era_table(eras: list[speed_timeline.Era]) -> pd.DataFrame:
    """One row per era: its runs, when, its versions (the changed ones in bold), seconds per image with the
    spread, the host's busy share and the verdict against the era before with its change."""
    rows = []
    for i, era in enumerate(eras, 1):
        versions = ", ".join(
            f"**{k} {v}**" if k in era.changed else f"{k} {v}"
            for k, v in era.versions.items()
            if v != "not recorded"
        )
        spread = "" if era.spread_s is None else f" ±{report.seconds(era.spread_s / 2)}"
        judged = "–" if era.verdict is None else f"{era.verdict} ({era.change_pct:+.1f}%)"
        busy = "–" if era.host_busy_pct is None else f"{era.host_busy_pct:.0f}%"
        figure = f"{report.seconds(era.seconds_per_image)}{spread}"
        rows.append((i, len(era.runs), _when(era), versions, figure, busy, judged))
    return pd.DataFrame(rows, columns=list(ERA_COLUMNS))


def plot_frame(points: pd.DataFrame) -> dict[str, Any]:
    """The plot's axes: seconds from zero (a change reads at its size); time with a margin on both sides, so
    the first and the last run sit inside the frame, not on its edges (an hour each side where every run has
    one time), ticks as `views.time_format` writes them. Gradio takes a time axis's limits in Unix seconds."""
    times = pd.DatetimeIndex(points["time"])
    first, last = times.min().timestamp(), times.max().timestamp()
    margin = 0.08 * (last - first) if last > first else 3600.0
    return {
        "y_lim": [0, 1.15 * points["s / image"].max()],
        "x_lim": [first - margin, last + margin],
        "x_axis_format": views.time_format(times),
    }


def era_points(studio: Studio, eras: list[speed_timeline.Era]) -> pd.DataFrame:
    """Each run's seconds per image at the time it ran, coloured by its era."""
    points = []
    for name, era in zip(era_names(eras), eras, strict=True):
        for run_id in era.runs:
            run = studio.runlog.get_run(run_id)
            per_image = run["latency_median"] / (run.get("num_images") or 1)
            points.append((pd.Timestamp(run["created_at"]), per_image, name, run_id))
    frame = pd.DataFrame(points, columns=["time", "s / image", "era", "run"])
    frame["time"] = pd.to_datetime(frame["time"], utc=True)
    return frame


def build_history_handlers(studio: Studio) -> dict[str, Callable]:
    """History's event functions, closed over one Studio (its run log)."""

    def records_of(filters: dict) -> list[dict]:
        return [report.log_record(r) for r in studio.history(HistoryFilter.of(filters))]

    @engine_errors
    def history(model, device, status, technique, since, limit):
        """The run log, newest first, filtered by model, device, status, technique, since (an ISO date or
        time) and a row limit: the table, the latency plot and a CSV of the runs."""
        records = records_of(locals())
        return views.history_outputs(records, exports.csv_file(records))

    @engine_errors
    def history_api(model="", device="", status="", technique="", since="", limit=200):
        """The API's `/history`: the table, plot and CSV the browser shows, and the runs as records in the
        shared vocabulary (JSON: the keys docs/api.md lists), newest first."""
        records = records_of(locals())
        return (*views.history_outputs(records, exports.csv_file(records)), records)

    def history_form(model, device, status, technique, since, limit):
        """History's Refresh and the tab opening: as `/history`, with a sentence under the filters where a
        filter is wrong (a bad date), the table, plot and CSV left as they were."""
        try:
            HistoryFilter.of(locals())
        except StudioError as exc:
            why = describe(exc)
            return {"note": f"⚠ {why[:1].upper()}{why[1:]} The table below is still the last view."}
        shown = history(
            model=model, device=device, status=status, technique=technique, since=since, limit=limit
        )
        return {**dict(zip(("table", "plot", "csv"), shown, strict=True)), "note": ""}

    def loaded(run_id) -> tuple[dict, dict]:
        """A logged run's columns and Generate's form filled from them, by name, with Generate shown."""
        row = studio.logged_run(validate_run_id(run_id))
        return row, {**filled(row), "tabs": gr.update(selected="generate")}

    @engine_errors
    def load_config(run_id) -> dict:
        """A logged run's configuration, ready in Generate's form (precision and technique groups
        included)."""
        return loaded(run_id)[1]

    @engine_errors
    def load_selected(table, evt: gr.SelectData) -> dict:
        """A click on a History row loads that run into Generate, which says which run it is."""
        run_id = int(table.iloc[evt.index[0]]["Run"])
        row, form = loaded(run_id)
        when = (row.get("created_at") or "")[:16].replace("T", " ")
        said = ", ".join(filter(None, [row.get("model"), row.get("config_label") or "baseline", when]))
        return {**form, "loaded": f"Loaded run #{run_id} ({said}) into the form."}

    def timeline_of(given: dict[str, Any]) -> dict[str, Any]:
        """A configuration's timeline on this machine, by output name (`TIMELINE`), from a handler's
        arguments (`TIMELINE_INPUTS` taken by name): a sentence in place of the Markdown block when the run
        log holds no such run."""
        request = speed_timeline.timeline_request(**{name: given[name] for name in TIMELINE_INPUTS})
        hardware = devices.detect().summary()
        eras = speed_timeline.timeline(studio.runlog, request, hardware)
        if not eras:
            said = (
                f"No finished run of {request.config_label} on {request.model} at {request.width}x"
                f"{request.height}, {request.steps} steps, batch {request.num_images} on {request.device} "
                "of this machine is in the run log yet: run it in Generate (or Compare) first, then again "
                "after an upgrade."
            )
            return {"table": None, "plot": None, "markdown": said, "eras": []}
        points = era_points(studio, eras)
        plot = gr.update(value=points, **plot_frame(points))
        return {
            "table": era_table(eras),
            "plot": plot,
            "markdown": speed_timeline.markdown(request, eras, speed_timeline.machine_words(hardware)),
            "eras": [era.as_json() for era in eras],
        }

    @engine_errors
    def timeline(
        model=DEFAULT_MODEL, config="baseline", steps=None, width=None, height=None, batch=1, device="auto"
    ):
        """Did an upgrade make it slower? One configuration's finished runs on this machine (same CPU and
        GPUs, model, size, steps, batch and device), oldest first, grouped into eras by the versions of the
        libraries that change speed: a table of the eras with each verdict against the era before, a plot of
        each run's seconds per image, the Markdown block to paste into an issue, and the eras (JSON)."""
        shown = timeline_of(locals())
        return tuple(shown[name] for name in TIMELINE)

    @engine_errors
    def timeline_form(model, config, steps, width, height, batch, device) -> dict[str, Any]:
        """History's "Speed over library versions": the timeline, or a sentence in its place (no such run,
        or a bad configuration or size)."""
        try:
            shown = timeline_of(locals())
        except StudioError as exc:
            return {"note": f"⚠ {describe(exc)}", "results": gr.update(visible=False)}
        if not shown.pop("eras"):
            return {"note": shown["markdown"], "results": gr.update(visible=False)}
        return {**shown, "note": "", "results": gr.update(visible=True)}

    def my_history() -> str:
        """Download my history: the visitor's runs (`runs.db`) and images, as one zip."""
        folder = Path(tempfile.mkdtemp(prefix="studio-export-"))
        return str(studio.my_history(folder / "my-history.zip"))

    @engine_errors
    def forget_my_history() -> str:
        """Delete my history: every run and image of the visitor's, said in a sentence."""
        count = studio.forget_my_history()
        return f"Deleted {count} run{'s' if count != 1 else ''} of yours and their images."

    def visitor_note() -> str:
        """Whose runs the tab shows, and what every visitor shares, on a public studio."""
        if visitors.mode() == "shared":
            return ""
        visitor = visitors.current()
        whose = "every visitor's runs" if visitor.sees_all else "your runs alone"
        return (
            f"You are {visitor.words}: History, its exports and Generate's loaded runs show {whose}; "
            "nobody else sees your prompts or images. Shared with everyone: the machines' benchmark cards "
            f"(figures, no prompts or images). Storage: {studio.retention_words()}."
        )

    return {
        "my_history": my_history,
        "forget_my_history": forget_my_history,
        "visitor_note": visitor_note,
        "timeline": timeline,
        "timeline_form": timeline_form,
        "history": history,
        "history_api": history_api,
        "history_form": history_form,
        "load_config": load_config,
        "load_selected": load_selected,
        "export_db": lambda: exports.database_copy(studio),
    }
