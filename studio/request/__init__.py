"""The one boundary where every request from the UI, the API, the CLI and the distributed launcher is checked.

Every face builds its `GenerationRequest` and its sweep, auto-tune and History settings with these functions;
nothing outside this package validates input. A request's fields are named once, in `REQUEST_FIELDS`
(`studio.request.fields`), and `build_request` takes them by name: it is the only way to a
`GenerationRequest`, and the checks behind it are private to this package.
"""

from __future__ import annotations

import importlib
from typing import Any

# Each name's module, imported on first use: the limits import without torch (the CLI's --help reads
# them), the rest load the registry when they are first asked for.
_WHERE = {
    "AutotuneSettings": "studio.request.sweep_limits",
    "FIELD_NAMES": "studio.request.fields",
    "GenerationRequest": "studio.request.generation",
    "HistoryFilter": "studio.request.queries",
    "MAX_CONFIGS": "studio.request.sweep_limits",
    "MAX_SEED": "studio.request.limits",
    "PRECISIONS": "studio.request.fields",
    "REQUEST_FIELDS": "studio.request.fields",
    "build_request": "studio.request.fields",
    "check_opts": "studio.request.generation",
    "check_sweep": "studio.request.sweep_limits",
    "parse_config": "studio.request.generation",
    "parse_opts": "studio.request.generation",
    "parse_setting_args": "studio.request.generation",
    "pick_fields": "studio.request.fields",
    "request_from_args": "studio.request.fields",
    "validate_counts": "studio.request.sweep_limits",
    "validate_run_id": "studio.request.queries",
    "validate_shard_target": "studio.request.queries",
    "with_config": "studio.request.generation",
}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'studio.request' has no attribute {name!r}")


__all__ = [
    "FIELD_NAMES",
    "MAX_CONFIGS",
    "MAX_SEED",
    "PRECISIONS",
    "REQUEST_FIELDS",
    "AutotuneSettings",
    "GenerationRequest",
    "HistoryFilter",
    "build_request",
    "check_opts",
    "check_sweep",
    "parse_opts",
    "parse_config",
    "parse_setting_args",
    "with_config",
    "pick_fields",
    "request_from_args",
    "validate_counts",
    "validate_run_id",
    "validate_shard_target",
]
