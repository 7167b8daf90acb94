"""Generate's handlers: `/generate` (the form's Generate too, which sends its technique boxes instead of one
list), `/estimate` (with what the first call should cost), the note on the first call under the form,
`/cancel`, the 'Retry with …' offer after an out-of-memory failure, and a PNG's settings
back into the form (`/read_image`).

`generate` and `estimate` take the request's fields by name (`**fields`, what `form_request` reads): the tab
passes its components with `inputs_kwargs`, so the API's parameters carry the fields' names."""

from __future__ import annotations

from collections.abc import Callable

import gradio as gr

from pipelines.spec import PipelineSpec
from studio import report
from studio.cards import measured_first_calls
from studio.engine import Studio
from studio.errors import (
    Cancelled,
    OutOfMemory,
    StudioError,
    UnavailableError,
    ValidationError,
    describe,
)
from studio.report import image_metadata
from studio.request import build_request
from studio.ui import views
from studio.ui.cancel import Cancellations
from studio.ui.handlers.common import (
    DEFAULT_MODEL,
    cancelled_note,
    engine_errors,
    form_request,
    form_values,
    optional_fields,
    session_of,
    stop_check,
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


def build_generate_handlers(studio: Studio, cancels: Cancellations) -> dict[str, Callable]:
    """Generate's event functions, closed over one Studio and the sessions' cancel flags."""
    memory_advice: dict[str, tuple[str, ...]] = {}  # per session: what to retry with after an out-of-memory

    def run_generate(req, request: gr.Request | None, progress: gr.Progress, should_stop):
        progress(0, desc="loading / configuring")
        memory_advice.pop(session_of(request), None)
        try:
            result = studio.generate(
                req,
                on_step=lambda i, n: progress((i, n), desc="denoising", unit="steps"),
                should_stop=should_stop,
            )
        except OutOfMemory as exc:
            memory_advice[session_of(request)] = exc.advice[:2]
            raise
        except Cancelled as exc:
            return gr.update(), cancelled_note(exc), None
        for warning in result.warnings:
            gr.Warning(warning)
        metrics = report.single_record(result)
        card = views.generate_card(metrics, model_note(result.request.spec))
        return views.batch_image(result.images), card, metrics

    @optional_fields
    @engine_errors
    def generate(request: gr.Request = None, progress=gr.Progress(), **fields):
        """Generate one image (or a batch) with the given model, techniques and settings; the run is timed
        and logged. Returns the image, the metrics card and the metrics (the shared vocabulary)."""
        should_stop = stop_check(cancels, request)  # first: it takes the flag a click reserved
        return run_generate(form_request(fields), request, progress, should_stop)

    def retry_offer(request: gr.Request):
        """After a failed generate: a 'Retry with …' button when it ran out of memory."""
        advice = memory_advice.pop(session_of(request), ())
        if not advice:
            return gr.update(visible=False), []
        return gr.update(visible=True, value=f"Retry with {' + '.join(advice)}"), list(advice)

    def apply_advice(advice, memory):
        """Tick the advised memory techniques in Generate's memory group."""
        return gr.update(visible=False), [*(memory or []), *(a for a in advice if a not in (memory or []))]

    @optional_fields
    @engine_errors
    def estimate(**fields):
        """The peak memory a /generate with these arguments should reach, before it runs
        (`studio.engine.memory_estimate`), and what its first call cost before (`first_call`: a sentence, or
        empty when nothing was measured)."""
        request = form_request(fields)
        return {
            **studio.estimate(request).as_json(),
            "first_call": measured_first_calls.sentence(studio, request),
        }

    def first_call_note(**fields):
        """Under Generate's buttons, as the form changes: what the first call of this configuration costs,
        before it is started. Nothing while the form is not yet a valid request (Generate says why)."""
        try:
            return measured_first_calls.sentence(studio, form_request(fields))
        except ValidationError:
            return ""

    @engine_errors
    def estimate_form(**fields):
        """Generate's "Will it fit?": the estimate as a sentence, from the form as it is; where it would not
        fit, with the memory techniques that would bring it under (what Generate would answer)."""
        request = form_request(fields)
        try:
            fits = studio.check_fits(request).as_json()["sentence"]
        except ValidationError as exc:
            return f"⚠ {describe(exc)}"
        return " ".join(filter(None, [fits, measured_first_calls.sentence(studio, request)]))

    def load_image(path):
        """A PNG's settings into Generate's form, once checked as a request; and a sentence on what was found
        (never an error)."""
        found = image_metadata.read(path) if path else None
        settings, message = None, (found.message if found else "Drop a PNG file to load its settings.")
        if found is not None and found.settings is not None:
            settings, message = checked_image_settings(found)
        if settings is None:
            return (*[gr.update()] * len(form_values({})), message)
        return (*form_values(settings), message)

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

    def reserve(request: gr.Request):
        """Generate was clicked: the run's cancel flag exists before it leaves the queue."""
        cancels.reserve(session_of(request))

    def cancel(request: gr.Request):
        stopping = cancels.cancel(session_of(request))
        return "Stopping after the current step…" if stopping else "Nothing is running."

    return {
        "generate": generate,
        "retry_offer": retry_offer,
        "apply_advice": apply_advice,
        "reserve": reserve,
        "cancel": cancel,
        "load_image": load_image,
        "estimate": estimate,
        "estimate_form": estimate_form,
        "first_call_note": first_call_note,
        "read_image": read_image,
    }
