"""The one registry of optimization techniques; importing this package fills it."""

# _quiet first: before diffusers imports torchao; the rest register their techniques.
from studio.optimizations import (  # noqa: F401
    _quiet,
    attention,
    caching,
    compile,
    guidance,
    memory,
    precision,
    quantization,
    runtime,
    static_quantization,
    tokens,
)
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
