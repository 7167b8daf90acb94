"""Shard's handlers: `/shard` (a model saved as sharded safetensors under the studio's home) and the tab's
Save, which says a refusal, a name already taken, in a sentence where the shards would be, by name
(`views.named`)."""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd

from studio.engine import Studio
from studio.errors import StudioError, describe
from studio.request import validate_shard_target
from studio.ui.handlers.common import engine_errors, model_name

SHARD_COLUMNS = ["component", "file", "MB", "tensors"]


class ShardHandlers:
    """Shard's event functions over one Studio."""

    def __init__(self, studio: Studio) -> None:
        self.studio = studio

    def saved(self, model, custom_model, name, max_shard_size) -> tuple[dict, pd.DataFrame]:
        """The model saved as shards: the report and one row per shard."""
        model, name = validate_shard_target(model_name(model, custom_model), name)
        data = self.studio.shard(model, name, max_shard_size)
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
        return data, pd.DataFrame(rows, columns=SHARD_COLUMNS)

    @engine_errors
    def shard(self, model, custom_model, name, max_shard_size):
        """Save a model's components as sharded safetensors under the studio's home (`sharded/<name>`):
        the report and its shards."""
        return self.saved(model, custom_model, name, max_shard_size)

    @engine_errors
    def shard_form(self, model, custom_model, name, max_shard_size) -> dict:
        """Shard's Save: as `/shard`, with a refused save said under the button instead of the last save's
        shards (cleared: they are not this save's)."""
        try:
            data, table = self.saved(model, custom_model, name, max_shard_size)
        except StudioError as exc:
            return {"report": None, "table": None, "note": f"⚠ Not saved: {describe(exc)}"}
        return {"report": data, "table": table, "note": ""}


def build_shard_handlers(studio: Studio) -> dict[str, Callable]:
    """Shard's event functions by name, over one Studio (`ShardHandlers`)."""
    tab = ShardHandlers(studio)
    return {"shard": tab.shard, "shard_form": tab.shard_form}
