"""Per-session cancel flags: the Cancel button sets one, the running step callback reads it."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager


class Cancellations:
    """Per-session cancel flags: the Cancel button sets one, the running step callback reads it.

    A run asked for from the form may wait in the queue before its handler starts; `reserve` (called when
    the button is clicked, outside the queue) gives it its flag at once, so a Cancel clicked while it waits
    stops it as soon as it starts instead of being lost. A run's flag lives as long as the run (`running`):
    once the session's runs have ended, a Cancel finds nothing to stop and says so.
    """

    def __init__(self):
        self._running: dict[str, set[threading.Event]] = {}  # the flags of the session's runs under way
        self._reserved: dict[str, threading.Event] = {}  # the flag of a run asked for, not started yet
        self._lock = threading.Lock()

    def reserve(self, session: str) -> None:
        """A run of `session` was asked for and may wait in the queue: its flag exists from now on."""
        with self._lock:
            self._reserved[session] = threading.Event()

    @contextmanager
    def running(
        self, session: str, client_gone: Callable[[], bool] | None = None
    ) -> Iterator[Callable[[], str | None]]:
        """A run of `session`, for the length of the `with` block: yields its stop check (the flag `reserve`
        made for it, if any), which says why the run must stop, or None to go on.

        `client_gone` reports that whoever asked for the run is no longer listening (a closed
        browser tab or client), so the run stops instead of computing for nobody.
        """
        with self._lock:
            event = self._reserved.pop(session, None) or threading.Event()
            self._running.setdefault(session, set()).add(event)

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
                runs = self._running.get(session, set())
                runs.discard(event)
                if not runs:
                    self._running.pop(session, None)

    def cancel(self, session: str) -> bool:
        """Stop `session`'s runs under way and the one it asked for that waits in the queue; whether there
        was any."""
        with self._lock:
            events = [*self._running.get(session, ()), *filter(None, [self._reserved.get(session)])]
        for event in events:
            event.set()
        return bool(events)
