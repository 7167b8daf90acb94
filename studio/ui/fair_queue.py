"""A fair queue on a public studio: each visitor may have at most `STUDIO_JOBS_PER_VISITOR` jobs (a generate,
a sweep, a profile, a card) waiting or running at once (default 2); one more is refused with a sentence
before it enters the queue, so that one visitor cannot fill it and turn everyone else away.

Gradio runs an event's `validator` when a job is submitted, before it is queued: `bound_jobs` gives every
job event of the app one that admits the job (or refuses it) and wraps the event's function so that the job
is counted out when it ends. Run locally (one user, `studio.visitors`) nothing is bounded.
"""

from __future__ import annotations

import functools
import inspect
import os
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

import gradio as gr

from studio import checks
from studio.ui.visiting import visitor_of

# The events that compute (a job each), by endpoint: the API's, the Generate form's own and the MCP tools'
JOBS = (
    "generate",
    "generate_form",
    "generate_retry",
    "compare",
    "ladder",
    "combinations",
    "autotune",
    "cards",
    "profile",
    "mcp_generate",
    "mcp_compare",
    "mcp_autotune",
)
DEFAULT_BOUND = 2


def bound() -> int:
    """Jobs one visitor may have waiting or running at once (`STUDIO_JOBS_PER_VISITOR`, default 2)."""
    raw = os.environ.get("STUDIO_JOBS_PER_VISITOR", "").strip()
    return checks.whole("STUDIO_JOBS_PER_VISITOR", raw, 1, 100) if raw else DEFAULT_BOUND


class Ledger:
    """Each visitor's jobs admitted and not yet ended."""

    def __init__(self, limit: int):
        self.limit = limit
        self._jobs: Counter[str] = Counter()
        self._lock = threading.Lock()

    def admit(self, visitor: str) -> str | None:
        """Count one more job of `visitor`'s in; or, where they have as many as they may, the sentence that
        refuses it."""
        with self._lock:
            if self._jobs[visitor] >= self.limit:
                return (
                    f"You already have {self._jobs[visitor]} jobs waiting or running on this studio, the "
                    "most one visitor may have at once; wait for one to finish (or cancel it), then send "
                    "this again."
                )
            self._jobs[visitor] += 1
            return None

    def end(self, visitor: str) -> None:
        with self._lock:
            self._jobs[visitor] = max(0, self._jobs[visitor] - 1)
            if not self._jobs[visitor]:
                del self._jobs[visitor]


def _owner(request: gr.Request | None) -> str | None:
    """Whose job a request is (None: the local user's, never bounded)."""
    return visitor_of(request).id


def _request_in(args: tuple, kwargs: dict) -> gr.Request | None:
    return next((a for a in (*args, *kwargs.values()) if isinstance(a, gr.Request)), None)


def _validator(ledger: Ledger, inputs: int) -> Callable:
    """The event's validator: every input valid, or, for a job over the visitor's bound, the first input
    invalid with the refusal (Gradio answers 422 with it: `gradio_client` raises it as a ValidationError, the
    page shows it on the form)."""

    def admit(request: gr.Request, *args: Any, **kwargs: Any) -> Any:
        owner = _owner(request)
        refused = None if owner is None else ledger.admit(owner)
        checks = [gr.validate(refused is None, refused or ""), *[gr.validate(True, "")] * (inputs - 1)]
        return checks[0] if inputs == 1 else checks

    return admit


def _counted_out(ledger: Ledger, fn: Callable) -> Callable:
    """`fn`, after which (and after its last step, for a generator) its job is counted out."""

    def end(args: tuple, kwargs: dict) -> None:
        owner = _owner(_request_in(args, kwargs))
        if owner is not None:
            ledger.end(owner)

    if inspect.isgeneratorfunction(fn):

        @functools.wraps(fn)
        def stepped(*args: Any, **kwargs: Any):
            try:
                return (yield from fn(*args, **kwargs))
            finally:
                end(args, kwargs)

        wrapper = stepped
    else:

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            try:
                return fn(*args, **kwargs)
            finally:
                end(args, kwargs)

    wrapper.__signature__ = inspect.signature(fn)
    return wrapper


def bound_jobs(demo: gr.Blocks, ledger: Ledger | None = None) -> Ledger:
    """Give every job event of `demo` (`JOBS`, queued) the admission and the count-out (`Ledger`)."""
    ledger = ledger or Ledger(bound())
    for block_fn in demo.fns.values():
        if block_fn.api_name in JOBS and block_fn.queue is not False and block_fn.fn is not None:
            block_fn.validator = _validator(ledger, len(block_fn.inputs))
            block_fn.fn = _counted_out(ledger, block_fn.fn)
    return ledger
