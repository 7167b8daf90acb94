"""Per-session, per-job cancel flags: a tab's Cancel button sets one, its running step callback reads it."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager


class Cancellations:
    """Cancel flags by session and job (a tab's kind of run: "generate", "compare", "cards", …): a tab's
    Cancel stops that tab's run, not another tab's that runs or waits in the same page.

    A run asked for from the form may wait in the queue before its handler starts; `reserve` (called when
    the button is clicked, outside the queue) gives it its flag at once, so a Cancel clicked while it waits
    stops it as soon as it starts instead of being lost. A run's flag lives as long as the run (`running`):
    once the job's runs have ended, a Cancel finds nothing to stop and says so.
    """

    def __init__(self):
        # by (session, job): the flags of runs under way, and of the run asked for that has not started
        self._running: dict[tuple[str, str], set[threading.Event]] = {}
        self._reserved: dict[tuple[str, str], threading.Event] = {}
        self._lock = threading.Lock()

    def reserve(self, session: str, job: str) -> None:
        """A `job` run of `session` was asked for and may wait in the queue: its flag exists from now on."""
        with self._lock:
            self._reserved[session, job] = threading.Event()

    @contextmanager
    def running(
        self, session: str, job: str, client_gone: Callable[[], bool] | None = None
    ) -> Iterator[Callable[[], str | None]]:
        """A `job` run of `session`, for the length of the `with` block: yields its stop check (the flag
        `reserve` made for it, if any), which says why the run must stop, or None to go on.

        `client_gone` reports that whoever asked for the run is no longer listening (a closed
        browser tab or client), so the run stops instead of computing for nobody.
        """
        key = (session, job)
        with self._lock:
            event = self._reserved.pop(key, None) or threading.Event()
            self._running.setdefault(key, set()).add(event)

        def should_stop() -> str | None:
            if event.is_set():
                return "cancelled by the user"
            if client_gone is not None and client_gone():
                return "the client disconnected"
            return None

        try:
            yield should_stop
        finally:
            with self._lock:
                runs = self._running.get(key, set())
                runs.discard(event)
                if not runs:
                    self._running.pop(key, None)

    def cancel(self, session: str, job: str) -> bool:
        """Stop `session`'s `job` runs under way and the one it asked for that waits in the queue; whether
        there was any."""
        key = (session, job)
        with self._lock:
            events = [*self._running.get(key, ()), *filter(None, [self._reserved.get(key)])]
        for event in events:
            event.set()
        return bool(events)
