"""What a long job (Compare, Ladder, Auto-tune, Profile) shows while it runs and after a Cancel.

While it runs, its progress ("Compare: configuration 2 of 3 (channels_last), round 1 of 3, step 7 of 20")
shows in a status area under its buttons (`status_area`; `wire_job` connects the buttons). A cancelled sweep
(`studio.sweeps.runner.SweepCancelled`) shows what it measured until then, in the same tables as a finished
one (`studio.ui.views`): rows of configurations that finished all their rounds as usual, the others marked
*partial* (fewer rounds than asked for, no verdict) or cancelled, under a sentence that says where it stopped.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import gradio as gr
import numpy as np
import pandas as pd
from PIL import Image

from studio import report
from studio.errors import Cancelled, describe
from studio.sweeps import ladder as ladder_mod
from studio.sweeps.runner import SweepCancelled
from studio.ui import exports, views
from studio.ui.widgets import generation_queue

STAGE_COLUMN = (("Stage", lambda r: r.get("stage", "")),)
READ_ROWS = (
    "Rows marked *partial* ran fewer rounds than asked for: their latency and speedup are over those rounds, "
    "with no verdict. Finished configurations are logged ok, the others cancelled."
)


def status_area(elem_id: str) -> gr.Markdown:
    """Where a long job's progress shows while it runs (and what its Cancel answers); hidden while empty."""
    return gr.Markdown("", elem_id=elem_id, min_height=64, container=True, padding=True, visible="hidden")


def wire_cancel(stop: gr.Button, shown_in: gr.Markdown, cancel: Callable, stopping: str, **api) -> None:
    """A Cancel button: `shown_in` says `stopping` (what `cancel` answers when it stops a run) at the click,
    in the page itself, and the server's answer replaces it only when it says something else ("Nothing is
    running."). The run can end before the server's answer arrives; that answer, shown as it came, would
    then cover what the run ended with. `api`: the answer's endpoint name (private without one)."""
    answer = gr.Textbox(visible=False, label="answer")

    def other_answer(said: str):
        return gr.skip() if said == stopping else gr.update(value=said, visible=True)

    stop.click(None, None, shown_in, js=f"() => {json.dumps(stopping)}")
    stop.click(cancel, None, answer, queue=False, **(api or {"api_visibility": "private"})).then(
        other_answer, answer, shown_in, queue=False, api_visibility="private"
    )


# A run's click closes the error toasts still open: they were about an earlier click, maybe already fixed.
CLEAR_TOASTS = "() => document.querySelectorAll('.toast-body .toast-close').forEach((b) => b.click())"


def clears_toasts(button: gr.Button) -> None:
    """A click on `button` first closes the toasts on the page (in the browser, before anything is sent)."""
    button.click(None, None, None, js=CLEAR_TOASTS, queue=False, api_visibility="private")


def wire_job(
    buttons: tuple[gr.Button, gr.Button, gr.Markdown],
    fn: Callable,
    *,
    reserve: Callable,
    cancel: Callable,
    stopping: str,
    **event,
) -> None:
    """(run, cancel, status): the run button runs `fn` (`event`: its inputs, outputs, api_name) in the
    generation queue with its progress in the status area, shown from the click. `reserve` makes the
    session's cancel flag at the click, outside the queue (a Cancel while the job waits is not lost); the
    Cancel button runs `cancel` (`wire_cancel`: `stopping`, what it answers when it stops a run, shows at
    once) in the status area, emptied and hidden when the job ends."""
    go, stop, status = buttons
    clears_toasts(go)

    def start(request: gr.Request):
        reserve(request)
        return gr.update(visible=True)

    job = go.click(start, None, status, queue=False, api_visibility="private").then(
        fn, show_progress_on=[status], **generation_queue(), **event
    )
    job.then(
        lambda: gr.update(value="", visible="hidden"), None, status, queue=False, api_visibility="private"
    )
    wire_cancel(stop, status, cancel, stopping)


def progress_to(progress: Any, job: str) -> Callable[[float, int, str], None]:
    """A sweep's progress callback (calls done, calls, where) for `gr.Progress`, each line named by `job`."""
    return lambda done, calls, where: progress(done / calls if calls else None, desc=f"{job}: {where}")


def sentence(exc: Cancelled, job: str, more: str = "") -> str:
    """The note a cancelled job shows over its partial results (`more`: a sentence after it)."""
    if not isinstance(exc, SweepCancelled):
        return f"{job}: {describe(exc)} The run is logged as cancelled." + (f"  \n{more}" if more else "")
    stage = f", {exc.stage}" if exc.stage else ""
    lines = [f"**{job}{stage}: {exc.summary()}**"]
    if any(r.get("partial") for r in exc.records):
        lines.append(READ_ROWS)
    note = report.host_note(exc.records)
    return "  \n".join(lines + ([more] if more else [])) + (f"\n\n{note}" if note else "")


def _rounds(record: dict[str, Any]) -> str:
    return f"partial: {record['rounds']} of {record['rounds_asked']} rounds"


def partial_rows(records: list[dict[str, Any]], first: tuple = ()) -> list[dict[str, str]]:
    """`report.readable_rows` for a cancelled sweep: a partial row shows its figures, its verdict says
    'partial: 2 of 3 rounds'."""
    shown = [{**r, "status": "ok"} if r.get("partial") else r for r in records]
    rows = report.readable_rows(shown, first)
    for row, record in zip(rows, records, strict=True):
        if record.get("partial"):
            row["Verdict"] = _rounds(record)
    return rows


def _markdown(exc: Cancelled, records: list[dict[str, Any]]) -> str:
    """The cancelled sweep's sentence and its table (as shown) in Markdown, for the download."""
    rows = partial_rows(records)
    head = list(rows[0])
    lines = [sentence(exc, "Compare").replace("  \n", "\n\n"), "", "| " + " | ".join(head) + " |"]
    lines.append("|" + "---|" * len(head))
    lines += ["| " + " | ".join(str(row[h]).replace("|", "\\|") for h in head) + " |" for row in rows]
    return "\n".join(lines)


def _caption(record: dict[str, Any]) -> str:
    if not record.get("partial"):
        return report.caption(record)
    return f"{report.caption({**record, 'status': 'ok'})} · {_rounds(record)}"


def _image(result: Any) -> Image.Image:
    """A result's first image: the saved one of a finished run, else drawn from the last call's pixels."""
    if result.images:
        return result.images[0]
    return Image.fromarray((np.clip(result.arrays[0], 0, 1) * 255).round().astype(np.uint8))


def _pictures(exc: Cancelled) -> list[tuple[dict[str, Any], Image.Image]]:
    """Each configuration of a cancelled Compare that has an image (finished or partial), with its record."""
    if not isinstance(exc, SweepCancelled):
        return []
    results = [e.result or e.partial for e in exc.partial.entries]
    return [(r, _image(res)) for r, res in zip(exc.records, results, strict=False) if res is not None]


def compare_cancelled(exc: Cancelled) -> dict[str, Any]:
    """Compare's outputs by name (those of `views.compare_outputs`) after a Cancel: the sentence, then every
    configuration so far (finished or partial): images, table, chart, slider and files."""
    records = exc.records if isinstance(exc, SweepCancelled) else []
    pictures = _pictures(exc)
    has_base = bool(pictures) and pictures[0][0] is records[0]
    pairs = {r["config"]: (pictures[0][1], image) for r, image in pictures[1:]} if has_base else {}
    choices = list(pairs)
    measured = [r for r in records if r["latency_s"] is not None]
    bars = views.latency_bars([(r["config"], r["latency_s"]) for r in measured])
    return {
        "results": gr.update(visible=True),
        "headline": sentence(exc, "Compare"),
        "gallery": [(image, _caption(r)) for r, image in pictures],
        "table": views.styled(pd.DataFrame(partial_rows(records))) if records else None,
        "details": views.details_table(records) if records else None,
        "latency_chart": bars if measured else None,
        "slider_choice": gr.update(choices=choices, value=choices[0] if choices else None),
        "slider": pairs[choices[0]] if choices else None,
        "pairs": pairs,
        "csv": exports.csv_file(records, "compare-cancelled.csv") if records else None,
        "markdown": exports.text_file(_markdown(exc, records), "compare-cancelled.md") if records else None,
        **views.no_xy(),
        "rows": records or None,
    }


def ladder_cancelled(exc: Cancelled) -> dict[str, Any]:
    """Ladder's outputs by name after a Cancel: results shown, the sentence, the rungs so far, their
    records."""
    records = exc.records if isinstance(exc, SweepCancelled) else []
    table = views.styled(pd.DataFrame(partial_rows(records, ladder_mod.STEP_COLUMN))) if records else None
    said = {"headline": sentence(exc, "Ladder"), "table": table, "rows": records or None}
    return {"results": gr.update(visible=True), **said}


def _floor(record: dict[str, Any]) -> str:
    if record.get("partial"):
        return "not judged (partial)"
    if record["status"] != "ok":
        return record["status"]
    return record.get("floor") or "met"


def autotune_cancelled(exc: Cancelled) -> dict[str, Any]:
    """Auto-tune's outputs by name (those of `views.autotune_outputs`) after a Cancel: the sentence, every
    row so far with its stage, latency against quality for the finished rows and against memory for those
    with rounds too, no winner."""
    rows = exc.records if isinstance(exc, SweepCancelled) else []
    table = None
    if rows:
        table = pd.DataFrame(partial_rows(rows, STAGE_COLUMN)).drop(columns=["Peak memory"])
        table["Quality floor"] = [_floor(r) for r in rows]
        table = views.styled(table)
    memory = views.tune_points([r for r in rows if r["status"] == "ok" or r.get("partial")])
    said = sentence(exc, "Auto-tune", "Nothing is offered: the search did not finish.")
    data = {
        "group_id": exc.partial.group_id if isinstance(exc, SweepCancelled) else None,
        "winner": None,
        "winner_label": "baseline",
        "summary": said,
        "confirmation": None,
        "rows": rows,
        "pareto_quality": [],
        "pareto_memory": [],
        "cancelled": True,
    }
    return {
        "results": gr.update(visible=True),
        "summary": said,
        "table": table,
        # a partial row's image was not judged
        "quality_plot": views.tune_points([r for r in rows if r["status"] == "ok"]),
        "memory_plot": views.memory_plot(memory, rows),
        "result": data,
        "winner": None,
        "apply": gr.update(interactive=False, value="Nothing to apply"),
    }
