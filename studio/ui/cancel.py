"""Per-session cancel flags: the Cancel button sets one, the running step callback reads it."""

from __future__ import annotations

import threading
from collections.abc import Callable


class Cancellations:
    """Per-session cancel flags: the Cancel button sets one, the running step callback reads it."""

    def __init__(self):
        self._flags: dict[str, threading.Event] = {}
        self._lock = threading.Lock()

    def begin(self, session: str, client_gone: Callable[[], bool] | None = None) -> Callable[[], str | None]:
        """A stop check for a run of `session`: says why the run must stop, or None to go on.

        `client_gone` reports that whoever asked for the run is no longer listening (a closed
        browser tab or client), so the run stops instead of computing for nobody.
        """
        with self._lock:
            event = self._flags[session] = threading.Event()

        def should_stop() -> str | None:
            if event.is_set():
                return "cancelled by the user"
            if client_gone is not None and client_gone():
                return "the client disconnected"
            return None

        return should_stop

    def cancel(self, session: str) -> bool:
        with self._lock:
            event = self._flags.get(session)
        if event is None:
            return False
        event.set()
        return True
