"""The one boundary where every request from the UI, the API, the CLI and the distributed launcher is checked.

Every face builds its `GenerationRequest` and its sweep, auto-tune and History settings with these functions;
nothing outside this package validates input.
"""

from studio.request.generation import (
    MAX_IMAGES,
    MAX_PROMPT,
    MAX_SEED,
    MAX_SIDE,
    MAX_STEPS,
    MIN_SIDE,
    PRECISIONS,
    GenerationRequest,
    build_request,
    check_opts,
    parse_config,
    parse_opts,
    parse_setting_args,
    parse_settings,
    request_from_args,
    validate_request,
    with_config,
)
from studio.request.queries import HistoryFilter, validate_history, validate_run_id, validate_shard_target
from studio.request.sweeps import (
    MAX_CONFIGS,
    MAX_ROUNDS,
    MAX_WARMUP,
    AutotuneSettings,
    SweepCounts,
    check_sweep,
    estimated_seconds,
    max_request_seconds,
    validate_autotune,
    validate_counts,
)

__all__ = [
    "MAX_CONFIGS",
    "MAX_IMAGES",
    "MAX_PROMPT",
    "MAX_ROUNDS",
    "MAX_SEED",
    "MAX_SIDE",
    "MAX_STEPS",
    "MAX_WARMUP",
    "MIN_SIDE",
    "PRECISIONS",
    "AutotuneSettings",
    "GenerationRequest",
    "HistoryFilter",
    "SweepCounts",
    "build_request",
    "check_opts",
    "check_sweep",
    "estimated_seconds",
    "max_request_seconds",
    "parse_opts",
    "parse_config",
    "parse_setting_args",
    "with_config",
    "parse_settings",
    "request_from_args",
    "validate_autotune",
    "validate_counts",
    "validate_history",
    "validate_request",
    "validate_run_id",
    "validate_shard_target",
]
