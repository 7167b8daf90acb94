"""The Combinations tab's handlers, `/combinations`: every pair of the chosen techniques on one model and
device, refused with the registry's reason, failed with the error, or measured (speedup and PSNR) against one
baseline in the same interleaved rounds (`studio.sweeps.combinations`). It reports where it is through
`gr.Progress`; the tab's Cancel stops it at the next denoising step and what it measured until then is shown.

It takes the request's fields by name (`**fields`, read by `form_request`), as the sweeps' handlers do, and
returns what it fills by name (the tab names its components the same, `studio.ui.views.filling`)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import gradio as gr
import pandas as pd

from studio.engine import Studio
from studio.errors import Cancelled
from studio.optimizations import availability
from studio.request import parse_opts
from studio.sweeps.combinations import DEFAULT_ROUNDS, plan_combinations, run_combinations
from studio.sweeps.combinations_report import as_json, grid, headline, reasons
from studio.ui import progress_views
from studio.ui.cancel import Cancellations
from studio.ui.handlers.common import (
    cancel_controls,
    cancellable_run,
    cancelled_note,
    engine_errors,
    family_of,
    form_request,
    optional_fields,
)
from studio.ui.handlers.sweeps import STOPPING

# A cell's background by what became of it: faster or slower beyond noise, refused, failed (else none).
LEGEND = (
    "Each cell: speedup over the baseline (×; ≈ within noise) / PSNR of its image against the baseline's; "
    "the diagonal is the technique alone. Green: faster, orange: slower (both beyond noise), grey: refused, "
    "red: failed."
)
COLOURS = {"faster": "#dcfce7", "slower": "#ffedd5", "refused": "#f1f5f9", "failed": "#fee2e2"}


def combinations_choices(model: str, custom: str) -> list[str]:
    """The speed and precision techniques that can run on the model a form names, on this machine."""
    rows = availability("auto", family=family_of(model, custom))
    return [r["name"] for r in rows if r["group"] != "memory" and r["unavailable"] is None]


def readable(text: str) -> str:
    """A name or a cell as a narrow column shows it: it may break after each '_' and inside a CamelCase
    error's name (zero-width spaces)."""
    return re.sub(r"(?<=[a-z]{2})(?=[A-Z][a-z])", "\u200b", text.replace("_", "_\u200b"))


def _colour(cell: Any) -> str:
    if cell is None:
        return ""
    kind = (cell.record or {}).get("verdict") if cell.outcome == "measured" else cell.outcome
    return f"background-color: {COLOURS[kind]}" if kind in COLOURS else ""


def combinations_table(result: Any) -> Any:
    """The combinations as a table: one row per technique, its name first, then one column per technique
    (the upper triangle filled; the diagonal is the technique alone), each cell coloured by its outcome."""
    names = list(result.plan.techniques)
    columns = ["Technique", *(readable(n) for n in names)]
    rows = [[readable(n), *map(readable, row)] for n, row in zip(names, grid(result), strict=True)]
    cells = {(c.row, c.column): c for c in result.cells}
    styles = pd.DataFrame(
        [["", *(_colour(cells.get((a, b))) for b in names)] for a in names], columns=columns
    )
    table = pd.DataFrame(rows, columns=columns).style.apply(lambda _frame: styles, axis=None)
    share = f"{90 / len(names):.2f}%"  # the page's width shared: no column wider than its share
    return gr.update(value=table, column_widths=["10%", *[share] * len(names)])


def combinations_outputs(result: Any) -> dict[str, Any]:
    """The tab's outputs by name: results shown, the headline, the table, the reasons, the JSON."""
    why = "\n".join(f"- {line}" for line in reasons(result))
    return {
        "results": gr.update(visible=True),
        "summary": f"{headline(result)}\n\n{LEGEND}",
        "table": combinations_table(result),
        "reasons": f"**Why**\n\n{why}" if why else "",
        "combinations": as_json(result),
    }


def combinations_cancelled(exc: Cancelled) -> dict[str, Any]:
    """The tab's outputs by name for a run stopped before its sweep began: nothing measured, said so."""
    return {
        "results": gr.update(visible=True),
        "summary": cancelled_note(exc),
        "table": None,
        "reasons": "",
        "combinations": {},
    }


class CombinationsHandlers:
    """The Combinations tab's event functions over one Studio and the sessions' cancel flags."""

    def __init__(self, studio: Studio, cancels: Cancellations) -> None:
        self.studio = studio
        self.cancels = cancels

    @optional_fields
    @engine_errors
    def combinations(
        self,
        techniques,
        include_compile,
        max_cells=None,  # a client that leaves it out caps nothing
        warmup=1,
        rounds=DEFAULT_ROUNDS,
        request: gr.Request = None,
        progress=gr.Progress(),
        **fields,
    ) -> dict[str, Any]:
        """Every pair of the chosen techniques (none: every speed and precision technique that can run
        here) on this model and device: refused with the registry's reason, failed with the error, or its
        speedup and PSNR against one baseline, all timed in the same interleaved rounds."""
        studio = self.studio
        # first: it takes the flag a click reserved
        with cancellable_run(self.cancels, request, "combinations") as should_stop:
            plan = plan_combinations(
                form_request(fields),
                parse_opts(techniques) or None,
                include_compile=include_compile or "auto",
                max_cells=max_cells,
                warmup=warmup,
                rounds=rounds,
                known=lambda r: found.cold_s if (found := studio.first_call(r)) else None,
            )
            progress_to = progress_views.progress_to(progress, "Combinations")
            try:
                result = run_combinations(studio, plan, progress=progress_to, should_stop=should_stop)
            except Cancelled as exc:
                return combinations_cancelled(exc)
            return combinations_outputs(result)


def combinations_boxes(model: str, custom: str, ticked: list[str]):
    """The technique boxes for the model now chosen (ticks that still can run are kept)."""
    choices = combinations_choices(model, custom)
    return gr.update(choices=choices, value=[n for n in ticked or [] if n in choices])


def build_combinations_handlers(studio: Studio, cancels: Cancellations) -> dict[str, Callable]:
    """The Combinations tab's event functions by name."""
    return {
        "combinations": CombinationsHandlers(studio, cancels).combinations,
        "combinations_boxes": combinations_boxes,
        **cancel_controls(cancels, "combinations", STOPPING),
    }
