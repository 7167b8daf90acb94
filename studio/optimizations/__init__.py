"""The one registry of optimization techniques; importing this package fills it."""

from studio.optimizations import attention, compile, memory, precision  # noqa: F401  (registers)
from studio.optimizations.base import (
    REGISTRY,
    Context,
    Optimization,
    call_contexts,
    check_conflicts,
    conflicts_of,
    get,
    ordered,
    unavailable_reason,
)

__all__ = [
    "REGISTRY",
    "Context",
    "Optimization",
    "call_contexts",
    "check_conflicts",
    "conflicts_of",
    "get",
    "ordered",
    "unavailable_reason",
]
