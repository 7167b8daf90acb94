"""Generate's handlers: `/generate` and the form's Generate (which sends its technique boxes instead of one
list, and shows a refused run in the card), `/estimate` (with what the first call should cost; the page's
"Will it fit?" says the same sentence), the notes under the form (the first call's cost, techniques that
cannot combine), `/cancel`, the 'Retry with …' offer after an out-of-memory failure, and a PNG's settings
back into the form (`/read_image`). Those that need the studio or a session's last run are the methods of
`GenerateHandlers`; `build_generate_handlers` gives them all by name.

`generate` and `estimate` take the request's fields by name (`**fields`, what `form_request` reads): the tab
passes its components with `inputs_kwargs`, so the API's parameters carry the fields' names. The form's
handlers return their outputs by name (`views.named` maps the names to the tab's components)."""

from __future__ import annotations

from collections.abc import Callable

import gradio as gr

from pipelines.spec import PipelineSpec
from studio import report
from studio.cards import measured_first_calls
from studio.engine import Studio
from studio.errors import (
    Cancelled,
    ConflictError,
    OutOfMemory,
    StudioError,
    UnavailableError,
    ValidationError,
    describe,
)
from studio.optimizations import check_conflicts, conflicts_of
from studio.report import image_metadata
from studio.request import build_request
from studio.ui import first_call_line, views
from studio.ui.cancel import Cancellations
from studio.ui.handlers.common import (
    DEFAULT_MODEL,
    cancel_controls,
    cancellable_run,
    cancelled_note,
    engine_errors,
    form_request,
    form_values,
    optional_fields,
    session_of,
)


def model_note(spec: PipelineSpec) -> str | None:
    """What a model's images are, where that is not a picture: a random-weight architecture draws noise by
    design (it is there to measure speed)."""
    if not spec.source.startswith("arch:"):
        return None
    return (
        f"**Noise by design:** {spec.id} has random weights, so its images are noise; it is there to measure "
        "speed, and the studio is working. For a picture, use tiny-shapes or a trained model."
    )


STOPPING = "Stopping after the current step…"  # the Cancel's answer while a run is going
REFUSALS = (ValidationError, UnavailableError)  # a run refused before it starts: said in the card


def filled(columns: dict) -> dict[str, object]:
    """Generate's form from run-log columns (`form_values`), by field name."""
    return form_values(columns)


def conflicts_note(precision: str | None, *ticked: list[str] | None) -> str:
    """Under the technique boxes, as soon as two ticked techniques cannot combine: each such pair with the
    registry's sentence (what Generate would refuse the run with); "" when they all combine."""
    names = {precision, *(name for box in ticked for name in box or [])} - {None, "fp32"}
    said = []
    for name in sorted(names):
        for other in sorted(conflicts_of(name) & names):
            if other > name:
                try:
                    check_conflicts({name, other})
                except ConflictError as exc:
                    said.append(f"⚠ {describe(exc)}")
    return "  \n".join(said)


def checked_image_settings(found: image_metadata.ImageSettings) -> tuple[dict | None, str]:
    """An image's settings checked as a typed request (`build_request`): every value but the techniques must
    pass, else nothing is loaded and the sentence says why; techniques this machine cannot run are loaded with
    the reason (the user may switch machine or untick them)."""
    fields = image_metadata.fields_from_settings(found.settings, DEFAULT_MODEL)
    try:
        build_request(**{**fields, "optimizations": []})  # a bad path or value cannot hide behind a technique
        build_request(**fields)
    except UnavailableError as exc:
        return found.settings, f"{found.message} {describe(exc)}"
    except StudioError as exc:
        return None, f"{found.message} Its settings were not loaded: {describe(exc)}"
    return found.settings, found.message


def batch_gallery(images: list) -> dict:
    """Generate's gallery of a batch: each image on its own (each PNG with its own settings), shown for a
    batch only."""
    shown = [(im, f"image {i + 1} of {len(images)}") for i, im in enumerate(images)]
    return gr.update(value=shown if len(images) > 1 else None, visible=len(images) > 1)


def apply_advice(advice, memory):
    """Tick the advised memory techniques in Generate's memory group."""
    return gr.update(visible=False), [*(memory or []), *(a for a in advice if a not in (memory or []))]


def load_image(path) -> dict:
    """A PNG's settings into Generate's form, once checked as a request; and a sentence on what was found
    (never an error)."""
    found = image_metadata.read(path) if path else None
    settings, message = None, (found.message if found else "Drop a PNG file to load its settings.")
    if found is not None and found.settings is not None:
        settings, message = checked_image_settings(found)
    return {"note": message} if settings is None else {**filled(settings), "note": message}


def read_image(path):
    """The API's `/read_image`: the settings a PNG carries, as run-log column names, once they pass the
    same checks as a typed request."""
    if not path:
        raise gr.Error("Give a PNG file (gradio_client: handle_file(path)).", print_exception=False)
    found = image_metadata.read(path)
    settings, message = (None, found.message) if found.settings is None else checked_image_settings(found)
    return {
        "found": settings is not None,
        "source": found.source,
        "message": message,
        "settings": settings,
    }


class GenerateHandlers:
    """Generate's event functions over one Studio and the sessions' cancel flags, with what a session's last
    run leaves for the events after it: the memory techniques to retry with after an out-of-memory, and the
    sentence the form's last run was refused with."""

    def __init__(self, studio: Studio, cancels: Cancellations) -> None:
        self.studio, self.cancels = studio, cancels
        self.memory_advice: dict[str, tuple[str, ...]] = {}  # per session: what to retry with
        self.refused: dict[str, str] = {}  # per session: the sentence the form's last run was refused with

    def run(self, req, request: gr.Request | None, progress: gr.Progress, should_stop) -> dict:
        """One run, by output name: its image, card and metrics; a cancelled run clears the image (it was the
        run before's) and says where it stopped. Warnings (a busy host) are lines of the card."""
        progress(0, desc="loading / configuring")
        self.memory_advice.pop(session_of(request), None)
        try:
            expected = measured_first_calls.expected_seconds(self.studio, req)
            with first_call_line.until_first_step(progress, expected) as preparing:

                def on_step(i: int, n: int) -> None:
                    preparing()
                    progress((i, n), desc="denoising", unit="steps")

                result = self.studio.generate(req, on_step=on_step, should_stop=should_stop)
        except OutOfMemory as exc:
            self.memory_advice[session_of(request)] = exc.advice[:2]
            raise
        except Cancelled as exc:
            shown = {"image": None, "card": cancelled_note(exc), "metrics": None}
            return {**shown, "batch": batch_gallery([])}
        metrics = report.single_record(result)
        card = views.generate_card(metrics, model_note(result.request.spec))
        shown = {"image": views.batch_image(result.images), "card": card, "metrics": metrics}
        return {**shown, "batch": batch_gallery(result.images)}

    @optional_fields
    @engine_errors
    def generate(self, request: gr.Request = None, progress=gr.Progress(), **fields):
        """Generate one image (or a batch) with the given model, techniques and settings; the run is timed
        and logged. Returns the image, the metrics card and the metrics (the shared vocabulary)."""
        # first: it takes the flag a click reserved
        with cancellable_run(self.cancels, request, "generate") as should_stop:
            shown = self.run(form_request(fields), request, progress, should_stop)
        return shown["image"], shown["card"], shown["metrics"]  # the form's batch gallery is not the API's

    @engine_errors
    def generate_form(self, request: gr.Request = None, progress=gr.Progress(), **fields) -> dict:
        """The form's Generate: as `/generate`, with a refused run (a bad value, techniques that cannot
        combine, a run that would not fit) said in the card instead of the last run's, and a note of a
        loaded run cleared (the form is the user's now)."""
        with cancellable_run(self.cancels, request, "generate") as should_stop:
            self.refused.pop(session_of(request), None)
            try:
                shown = self.run(form_request(fields), request, progress, should_stop)
            except REFUSALS as exc:
                self.refused[session_of(request)] = describe(exc)
                shown = {"image": None, "card": views.refused_card(describe(exc)), "metrics": None}
                shown["batch"] = batch_gallery([])
        return {**shown, "loaded": ""}

    def refusal_toast(self, request: gr.Request):
        """After the form's Generate: the refusal's toast too (the card already says it), gone after a
        while so that it does not cover the next run's card."""
        why = self.refused.pop(session_of(request), None)
        if why is not None:
            raise gr.Error(why, duration=10, print_exception=False)

    def retry_offer(self, request: gr.Request):
        """After a failed generate: a 'Retry with …' button when it ran out of memory."""
        advice = self.memory_advice.pop(session_of(request), ())
        if not advice:
            return gr.update(visible=False), []
        return gr.update(visible=True, value=f"Retry with {' + '.join(advice)}"), list(advice)

    def fit_answer(self, request) -> dict:
        """The estimate (`studio.engine.memory_estimate`) with one sentence for every face: where it would
        not fit, with the memory techniques that would bring it under (what a run would be refused with);
        and what its first call cost before (`first_call`: a sentence, or empty)."""
        first_call = measured_first_calls.sentence(self.studio, request)
        return {**self.studio.will_it_fit(request), "first_call": first_call}

    @optional_fields
    @engine_errors
    def estimate(self, **fields):
        """The peak memory a /generate with these arguments should reach, before it runs, whether it fits
        (`sentence`: where not, with the memory techniques that would make it fit), and what its first call
        cost before (`first_call`: a sentence, or empty when nothing was measured)."""
        return self.fit_answer(form_request(fields))

    @engine_errors
    def estimate_form(self, **fields):
        """Generate's "Will it fit?": `/estimate`'s sentences, from the form as it is."""
        answer = self.fit_answer(form_request(fields))
        warn = "⚠ " if answer["fits"] is False else ""
        return " ".join(filter(None, [warn + answer["sentence"], answer["first_call"]]))

    def first_call_note(self, **fields):
        """Under Generate's buttons, as the form changes and after each run: what the first call of this
        configuration costs, before it is started. Nothing while the form is not a request that may run
        (Generate and the note under the boxes say why)."""
        try:
            request = form_request(fields)
        except REFUSALS:
            return ""
        return measured_first_calls.sentence(self.studio, request)


def build_generate_handlers(studio: Studio, cancels: Cancellations) -> dict[str, Callable]:
    """Generate's event functions by name: `GenerateHandlers`' over one Studio, and those that need none."""
    tab = GenerateHandlers(studio, cancels)
    return {
        "generate": tab.generate,
        "generate_form": tab.generate_form,
        "refusal_toast": tab.refusal_toast,
        "retry_offer": tab.retry_offer,
        "estimate": tab.estimate,
        "estimate_form": tab.estimate_form,
        "first_call_note": tab.first_call_note,
        **cancel_controls(cancels, "generate", STOPPING),
        "conflicts_note": conflicts_note,
        "apply_advice": apply_advice,
        "load_image": load_image,
        "read_image": read_image,
    }
