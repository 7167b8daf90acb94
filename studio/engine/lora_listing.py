"""The LoRAs the studio finds by name (`$STUDIO_HOME/loras`, then the bundled `assets/loras`), as every face
lists them: the CLI's `loras` command, Generate's LoRA picker and the API's `/loras`."""

from __future__ import annotations

from typing import Any

from pipelines.loras import find_loras, lora_folders
from studio import settings


def folders() -> list[str]:
    """Where LoRAs are found by name, in order."""
    return [str(f) for f in lora_folders(settings.home())]


def lora_rows() -> list[dict[str, Any]]:
    """Every LoRA the folders hold: name, the model it was trained for (`base`, and its `family`), rank,
    adapted layers, size, AUTOMATIC1111's short hash and path."""
    return [
        {
            "name": f.name,
            "base": f.base,
            "family": f.family,
            "rank": f.rank,
            "layers": f.layers,
            "size_mb": round(f.size / 2**20, 2),
            "hash": f.hash,
            "path": str(f.path),
        }
        for f in find_loras(lora_folders(settings.home()))
    ]
