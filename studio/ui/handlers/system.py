"""The System and Big models handlers: `/system` (what this machine can run) and `/shard` (a model saved
as sharded safetensors under the studio's home; the tab's button says a refusal, a name already taken, in a
sentence where the shards would be, by name: `views.named`)."""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd

from studio.engine import Studio
from studio.errors import StudioError, describe
from studio.request import validate_shard_target
from studio.ui import views
from studio.ui.handlers.common import engine_errors, model_name


def build_system_handlers(studio: Studio) -> dict[str, Callable]:
    """The System and Big models event functions, closed over one Studio."""

    def saved(model, custom_model, name, max_shard_size) -> tuple[dict, pd.DataFrame]:
        """The model saved as shards: the report and one row per shard."""
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

    @engine_errors
    def shard(model, custom_model, name, max_shard_size):
        """Save a model's components as sharded safetensors under the studio's home (`sharded/<name>`):
        the report and its shards."""
        return saved(model, custom_model, name, max_shard_size)

    @engine_errors
    def shard_form(model, custom_model, name, max_shard_size) -> dict:
        """Big models' Save: as `/shard`, with a refused save said under the button instead of the last
        save's shards (cleared: they are not this save's)."""
        try:
            data, table = saved(model, custom_model, name, max_shard_size)
        except StudioError as exc:
            return {"report": None, "table": None, "note": f"⚠ Not saved: {describe(exc)}"}
        return {"report": data, "table": table, "note": ""}

    def system():
        data = studio.system_facts()
        return data, *views.system_tables(data)

    return {"shard": shard, "shard_form": shard_form, "system": system}
