"""The few named exceptions of the studio. Every message says what to do.

The base class and the errors `pipelines/` raises live in `pipelines/errors.py` (the lower layer)."""

from __future__ import annotations

from pipelines.errors import ModelLoadError, StudioError, ValidationError, describe

__all__ = [
    "Cancelled",
    "ConflictError",
    "ModelLoadError",
    "OutOfMemory",
    "RunFailed",
    "RunLogError",
    "StudioError",
    "UnavailableError",
    "ValidationError",
    "describe",
    "first_line",
]


def first_line(exc: BaseException) -> str:
    """An exception's first line, without a closing period (its type's name when it says nothing): the part of
    a library's error that fits inside one of the studio's sentences."""
    text = str(exc).strip()
    return (text.splitlines()[0] if text else type(exc).__name__).rstrip(".")[:300]


class UnavailableError(StudioError):
    """A requested technique or device cannot run on this machine."""


class ConflictError(ValidationError):
    """Two requested techniques cannot be combined."""


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
