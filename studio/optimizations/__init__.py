"""The one registry of optimization techniques; importing this package fills it."""

# Importing a module registers its techniques, so this order is the registry's: the order of the README's
# table and of every list of techniques. _quiet first: before diffusers imports torchao.
# isort: off
from studio.optimizations import (  # noqa: F401
    _quiet,
    attention,
    attention_backends,
    caching,
    transformer_caching,
    layout,
    trace,
    compile,
    aot_package,
    guidance,
    memory,
    precision,
    quantization,
    transformer_memory,
    runtime,
    static_quantization,
    openvino,
    tokens,
    step_lever,
)

# isort: on
from studio.optimizations.availability import availability
from studio.optimizations.base import (
    REGISTRY,
    Context,
    Optimization,
    call_contexts,
    check_conflicts,
    conflict_reason_of,
    conflicts_of,
    get,
    ordered,
    unavailable_reason,
    works_on,
)

__all__ = [
    "REGISTRY",
    "availability",
    "Context",
    "Optimization",
    "call_contexts",
    "check_conflicts",
    "conflict_reason_of",
    "conflicts_of",
    "get",
    "ordered",
    "unavailable_reason",
    "works_on",
]
