"""History's handlers: `/history` (the run log, filtered, with its CSV; the tab's Refresh answers a bad filter
with a sentence instead, and fills the gallery of the same runs' images), `/load_config` (a logged run back
into Generate's form), a click on a History row or "Send to Generate" under a picked image (the same, and
Generate names the run it loaded), "Reuse this seed" (a picked image's seed alone into Generate),
`/export_db`, and `/timeline` (did an upgrade make it slower? one configuration's runs on this machine
grouped by the library versions they ran under, `studio.engine.speed_timeline`). They are the methods of
`HistoryHandlers`, over one Studio; each returns its outputs by name (`views.named` maps the names to the
tab's components)."""

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
from studio.ui import exports, gallery_views, views
from studio.ui.handlers.common import DEFAULT_MODEL, engine_errors
from studio.ui.handlers.generate import filled

TIMELINE_INPUTS = ("model", "config", "steps", "width", "height", "batch", "device")
HISTORY = ("table", "plot", "csv")  # the view of the runs `/history` answers, then their records
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
            run = studio.logged_run(run_id)
            per_image = run["latency_s"] / (run.get("batch") or 1)
            points.append((pd.Timestamp(run["created_at"]), per_image, name, run_id))
    frame = pd.DataFrame(points, columns=["time", "s / image", "era", "run"])
    frame["time"] = pd.to_datetime(frame["time"], utc=True)
    return frame


def unpicked() -> dict[str, Any]:
    """The gallery's side with no image picked: no image, a sentence, no run, its buttons off."""
    off = gr.update(interactive=False)
    said = gallery_views.NOTHING_PICKED
    return {"large": None, "picked": said, "picked_run": None, "reuse": off, "send": off}


class HistoryHandlers:
    """History's event functions over one Studio (its run log, as the visitor of each request sees it)."""

    def __init__(self, studio: Studio) -> None:
        self.studio = studio

    def view_of(self, filters: dict) -> dict[str, Any]:
        """The runs the filters show (the run log's rows, the current visitor's alone on a public studio),
        newest first: `rows`, their `records`, and the `table`, `plot` and `csv` of them."""
        rows = self.studio.history(HistoryFilter.of(filters))
        records = [report.log_record(r) for r in rows]
        shown = views.history_outputs(records, exports.csv_file(records), gallery_views.table_prompts(rows))
        return {"rows": rows, "records": records, **shown}

    @engine_errors
    def history(self, model="", device="", status="", technique="", since="", limit=200) -> dict[str, Any]:
        """The run log, newest first, filtered by model, device, status, technique, since (an ISO date or
        time) and a row limit: the table, the latency plot and a CSV of the runs the browser shows, and the
        runs as records in the shared vocabulary (JSON: the keys docs/api.md lists)."""
        view = self.view_of(locals())
        return {name: view[name] for name in (*HISTORY, "records")}

    @engine_errors
    def history_form(self, model, device, status, technique, since, limit) -> dict[str, Any]:
        """History's Refresh and the tab opening: as `/history`, and the gallery of the same runs' images
        (`gallery_views.gallery_of`: `gallery`, and the run behind each image in `images`), nothing picked;
        a sentence under the filters where a filter is wrong (a bad date), the views left as they were."""
        filters = dict(locals())
        try:
            HistoryFilter.of(filters)
        except StudioError as exc:
            why = describe(exc)
            return {"note": f"⚠ {why[:1].upper()}{why[1:]} The table below is still the last view."}
        view = self.view_of(filters)
        return {
            **{name: view[name] for name in HISTORY},
            **gallery_views.gallery_of(view["rows"], view["records"]),
            **unpicked(),
            "note": "",
        }

    def loaded(self, run_id) -> tuple[dict, dict]:
        """A logged run's columns and Generate's form filled from them, by name, with Generate shown."""
        row = self.studio.logged_run(validate_run_id(run_id))
        return row, {**filled(row), "tabs": gr.update(selected="generate")}

    @engine_errors
    def load_config(self, run_id) -> dict:
        """A logged run's configuration, ready in Generate's form (precision and technique groups
        included)."""
        return self.loaded(run_id)[1]

    def announced(self, run_id: int) -> dict:
        """A logged run loaded into Generate (`loaded`), which says which run it is."""
        row, form = self.loaded(run_id)
        when = (row.get("created_at") or "")[:16].replace("T", " ")
        said = ", ".join(filter(None, [row.get("model"), row.get("config_label") or "baseline", when]))
        return {**form, "loaded": f"Loaded run #{run_id} ({said}) into the form."}

    @engine_errors
    def load_selected(self, table, evt: gr.SelectData) -> dict:
        """A click on a History row loads that run into Generate, which says which run it is."""
        return self.announced(int(table.iloc[evt.index[0]]["Run"]))

    @engine_errors
    def pick_image(self, images: list[list[int]], evt: gr.SelectData) -> dict[str, Any]:
        """An image picked in History's gallery (`images`: the run and the image's place in it behind each
        thumbnail, kept on the server): the image large, read again from the run's own row (the visitor's
        alone), its settings in words, the run kept for the buttons under them, which turn on."""
        run_id, number = images[evt.index]
        row = self.studio.logged_run(validate_run_id(run_id))
        on = gr.update(interactive=True)
        return {
            "large": gallery_views.image_of(row, number, gallery_views.LARGE_SIDE),
            "picked": gallery_views.picked_words(row),
            "picked_run": row["id"],
            "reuse": on,
            "send": on,
        }

    @engine_errors
    def reuse_seed(self, run_id) -> dict[str, Any]:
        """ "Reuse this seed": the picked run's seed into Generate's seed field, every other field left as the
        user left it, and Generate shown, saying whose seed it is."""
        row = self.studio.logged_run(validate_run_id(run_id))
        said = f"Seed {row['seed']} of run #{row['id']} is in the form; every other field is as you left it."
        return {"seed": row["seed"], "loaded": said, "tabs": gr.update(selected="generate")}

    @engine_errors
    def send_picked(self, run_id) -> dict[str, Any]:
        """ "Send to Generate": the picked image's run loaded into Generate, as a click on its row does."""
        return self.announced(validate_run_id(run_id))

    def timeline_of(self, given: dict[str, Any]) -> dict[str, Any]:
        """A configuration's timeline on this machine, by output name (`table`, `plot`, `markdown`, `eras`),
        from a handler's arguments (`TIMELINE_INPUTS` taken by name): a sentence in place of the Markdown
        block when the run log holds no such run."""
        request = speed_timeline.timeline_request(**{name: given[name] for name in TIMELINE_INPUTS})
        hardware = devices.detect().summary()
        eras = self.studio.timeline(request, hardware)
        if not eras:
            said = (
                f"No finished run of {request.config_label} on {request.model} at {request.width}x"
                f"{request.height}, {request.steps} steps, batch {request.batch} on {request.device} "
                "of this machine is in the run log yet: run it in Generate (or Compare) first, then again "
                "after an upgrade."
            )
            return {"table": None, "plot": None, "markdown": said, "eras": []}
        points = era_points(self.studio, eras)
        plot = gr.update(value=points, **plot_frame(points))
        return {
            "table": era_table(eras),
            "plot": plot,
            "markdown": speed_timeline.markdown(request, eras, speed_timeline.machine_words(hardware)),
            "eras": [era.as_json() for era in eras],
        }

    @engine_errors
    def timeline(
        self,
        model=DEFAULT_MODEL,
        config="baseline",
        steps=None,
        width=None,
        height=None,
        batch=1,
        device="auto",
    ) -> dict[str, Any]:
        """Did an upgrade make it slower? One configuration's finished runs on this machine (same CPU and
        GPUs, model, size, steps, batch and device), oldest first, grouped into eras by the versions of the
        libraries that change speed: a table of the eras with each verdict against the era before, a plot of
        each run's seconds per image, the Markdown block to paste into an issue, and the eras (JSON)."""
        return self.timeline_of(locals())

    @engine_errors
    def timeline_form(self, model, config, steps, width, height, batch, device) -> dict[str, Any]:
        """History's "Speed over library versions": the timeline, or a sentence in its place (no such run,
        or a bad configuration or size)."""
        try:
            shown = self.timeline_of(locals())
        except StudioError as exc:
            return {"note": f"⚠ {describe(exc)}", "results": gr.update(visible=False)}
        if not shown.pop("eras"):
            return {"note": shown["markdown"], "results": gr.update(visible=False)}
        return {**shown, "note": "", "results": gr.update(visible=True)}

    def my_history(self) -> str:
        """Download my history: the visitor's runs (`runs.db`) and images, as one zip."""
        folder = Path(tempfile.mkdtemp(prefix="studio-export-"))
        return str(self.studio.my_history(folder / "my-history.zip"))

    @engine_errors
    def forget_my_history(self) -> str:
        """Delete my history: every run and image of the visitor's, said in a sentence."""
        count = self.studio.forget_my_history()
        return f"Deleted {count} run{'s' if count != 1 else ''} of yours and their images."

    def visitor_note(self) -> str:
        """Whose runs the tab shows, and what every visitor shares, on a public studio."""
        if visitors.mode() == "shared":
            return ""
        visitor = visitors.current()
        whose = "every visitor's runs" if visitor.sees_all else "your runs alone"
        return (
            f"You are {visitor.words}: History, its exports and Generate's loaded runs show {whose}; "
            "nobody else sees your prompts or images. Shared with everyone: the machines' cards "
            f"(figures, no prompts or images). Storage: {self.studio.retention_words()}."
        )

    def export_db(self) -> str:
        """Download the database: a copy of the run log (the visitor's runs alone on a public studio)."""
        return exports.database_copy(self.studio)


def build_history_handlers(studio: Studio) -> dict[str, Callable]:
    """History's event functions by name, over one Studio (`HistoryHandlers`)."""
    tab = HistoryHandlers(studio)
    return {
        "history": tab.history,
        "history_form": tab.history_form,
        "load_config": tab.load_config,
        "load_selected": tab.load_selected,
        "pick_image": tab.pick_image,
        "reuse_seed": tab.reuse_seed,
        "send_picked": tab.send_picked,
        "timeline": tab.timeline,
        "timeline_form": tab.timeline_form,
        "my_history": tab.my_history,
        "forget_my_history": tab.forget_my_history,
        "visitor_note": tab.visitor_note,
        "export_db": tab.export_db,
    }
