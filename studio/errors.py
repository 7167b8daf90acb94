"""The few named exceptions of the studio. Every message says what to do."""

from __future__ import annotations


class StudioError(Exception):
    """Base class: a failure the user can act on; the message is shown as is."""


def describe(exc: BaseException) -> str:
    """The message of `exc` with its notes (e.g. a run log that could not record the failure)."""
    return " ".join([str(exc), *getattr(exc, "__notes__", ())])


class ValidationError(StudioError, ValueError):
    """A request is malformed or out of range; raised before any model work."""


class UnavailableError(StudioError):
    """A requested technique or device cannot run on this machine."""


class ConflictError(ValidationError):
    """Two requested techniques cannot be combined."""


class ModelLoadError(StudioError):
    """A model could not be loaded (missing, corrupt, not safetensors, not allowed)."""


class RunFailed(StudioError):
    """A generation started but failed (out of memory, NaN output, ...)."""


class OutOfMemory(RunFailed):
    """The device ran out of memory; `advice` names the memory techniques to retry with."""

    def __init__(self, message: str, advice: tuple[str, ...] = ()):
        super().__init__(message)
        self.advice = advice


class RunLogError(StudioError):
    """The run log could not be written (read-only database, full disk, locked file)."""


class Cancelled(StudioError):
    """The user cancelled the run, or the client went away."""
