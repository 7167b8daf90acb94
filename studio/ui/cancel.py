"""Per-session cancel flags: the Cancel button sets one, the running step callback reads it."""

from __future__ import annotations

import threading
from collections.abc import Callable


class Cancellations:
    """Per-session cancel flags: the Cancel button sets one, the running step callback reads it.

    A run asked for from the form may wait in the queue before its handler starts; `reserve` (called when
    the button is clicked, outside the queue) gives it its flag at once, so a Cancel clicked while it waits
    stops it as soon as it starts instead of being lost.
    """

    def __init__(self):
        self._flags: dict[str, threading.Event] = {}
        self._reserved: dict[str, threading.Event] = {}  # the flag of a run asked for, not started yet
        self._lock = threading.Lock()

    def reserve(self, session: str) -> None:
        """A run of `session` was asked for and may wait in the queue: its flag exists from now on."""
        with self._lock:
            self._reserved[session] = threading.Event()

    def begin(self, session: str, client_gone: Callable[[], bool] | None = None) -> Callable[[], str | None]:
        """A stop check for a run of `session` (the flag `reserve` made for it, if any): says why the run
        must stop, or None to go on.

        `client_gone` reports that whoever asked for the run is no longer listening (a closed
        browser tab or client), so the run stops instead of computing for nobody.
        """
        with self._lock:
            event = self._flags[session] = self._reserved.pop(session, None) or threading.Event()

        def should_stop() -> str | None:
            if event.is_set():
                return "cancelled by the user"
            if client_gone is not None and client_gone():
                return "the client disconnected"
            return None

        return should_stop

    def cancel(self, session: str) -> bool:
        """Stop `session`'s running run and the one it asked for that waits in the queue; whether there was
        any."""
        with self._lock:
            events = [e for e in (self._flags.get(session), self._reserved.get(session)) if e is not None]
        for event in events:
            event.set()
        return bool(events)
