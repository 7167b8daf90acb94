"""The System and Big models handlers: `/system` (what this machine can run) and `/shard` (a model saved
as sharded safetensors under the studio's home)."""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd

from studio.engine import Studio
from studio.request import validate_shard_target
from studio.ui import views
from studio.ui.handlers.common import engine_errors, model_name


def build_system_handlers(studio: Studio) -> dict[str, Callable]:
    """The System and Big models event functions, closed over one Studio."""

    @engine_errors
    def shard(model, custom_model, name, max_shard_size):
        model, name = validate_shard_target(model_name(model, custom_model), name)
        data = studio.shard(model, name, max_shard_size)
        rows = [
            {
                "component": c["name"],
                "file": s["file"],
                "MB": round(s["bytes"] / 1e6, 3),
                "tensors": s["tensors"],
            }
            for c in data["components"]
            for s in c["shards"]
        ]
        return data, pd.DataFrame(rows, columns=["component", "file", "MB", "tensors"])

    def system():
        data = studio.system_facts()
        return data, *views.system_tables(data)

    return {"shard": shard, "system": system}
