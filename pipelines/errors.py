"""The errors a user can act on, at the lowest layer: `pipelines/` raises them, `studio/errors.py` adds the
engine's own and re-exports these, so both layers share one hierarchy and nothing here imports `studio`."""

from __future__ import annotations


class StudioError(Exception):
    """Base class: a failure the user can act on; the message is shown as is."""


def describe(exc: BaseException) -> str:
    """The message of `exc` with its notes (e.g. a run log that could not record the failure)."""
    return " ".join([str(exc), *getattr(exc, "__notes__", ())])


class ValidationError(StudioError, ValueError):
    """A request is malformed or out of range; raised before any model work."""


class ModelLoadError(StudioError):
    """A model could not be loaded (missing, corrupt, not safetensors, not allowed)."""
