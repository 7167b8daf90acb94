"""History's handlers: `/history` (the run log, filtered, with its CSV; the tab's Refresh answers a bad filter
with a sentence instead), `/load_config` (a logged run back into Generate's form), a click on a History row
(the same, and Generate names the run it loaded), and `/export_db`. The form's handlers return their outputs
by name (`views.named`)."""

from __future__ import annotations

from collections.abc import Callable

import gradio as gr

from studio import report
from studio.engine import Studio
from studio.errors import StudioError, describe
from studio.request import HistoryFilter, validate_run_id
from studio.ui import exports, views
from studio.ui.handlers.common import engine_errors
from studio.ui.handlers.generate import filled


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

    return {
        "history": history,
        "history_api": history_api,
        "history_form": history_form,
        "load_config": load_config,
        "load_selected": load_selected,
        "export_db": lambda: exports.database_copy(studio),
    }
