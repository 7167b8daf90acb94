"""History's handlers: `/history` (the run log, filtered, with its CSV), `/load_config` (a logged run back
into Generate's form), a click on a History row, and `/export_db`."""

from __future__ import annotations

from collections.abc import Callable

import gradio as gr

from studio import report
from studio.engine import Studio
from studio.request import validate_history, validate_run_id
from studio.ui import exports, views
from studio.ui.handlers.common import engine_errors, form_values


def build_history_handlers(studio: Studio) -> dict[str, Callable]:
    """History's event functions, closed over one Studio (its run log)."""

    @engine_errors
    def history(model, device, status, technique, since, limit):
        f = validate_history(model, device, status, technique, since, None, limit or 200)
        rows = studio.history(f)
        records = [report.log_record(r) for r in rows]
        return views.history_outputs(records, exports.csv_file(records))

    @engine_errors
    def load_config(run_id):
        """A logged run's configuration, ready in Generate's form (precision and technique groups
        included)."""
        row = studio.logged_run(validate_run_id(run_id))
        return (*form_values(row), gr.update(selected="generate"))

    def load_selected(table, evt: gr.SelectData):
        """A click on a History row loads that run into Generate."""
        return load_config(table.iloc[evt.index[0]]["Run"])

    return {
        "history": history,
        "load_config": load_config,
        "load_selected": load_selected,
        "export_db": lambda: exports.database_copy(studio),
    }
