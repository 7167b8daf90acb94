"""Where the studio keeps its database and images, and library versions for the run log."""

from __future__ import annotations

import functools
import os
from importlib import metadata
from pathlib import Path

PACKAGES = (
    "torch",
    "diffusers",
    "transformers",
    "accelerate",
    "gradio",
    "sqlite-utils",
    "safetensors",
    "torchao",
    "tomesd",
)


def home() -> Path:
    """`$STUDIO_HOME`, else /data/studio on a Space with persistent storage, else ./studio-data."""
    if os.environ.get("STUDIO_HOME"):
        return Path(os.environ["STUDIO_HOME"])
    data = Path("/data")
    if data.is_dir() and os.access(data, os.W_OK):
        return data / "studio"
    return Path.cwd() / "studio-data"


def db_path() -> Path:
    return Path(os.environ.get("STUDIO_DB") or home() / "runs.db")


def outputs_dir() -> Path:
    return Path(os.environ.get("STUDIO_OUTPUTS") or home() / "outputs")


@functools.lru_cache(maxsize=1)
def versions() -> dict[str, str]:
    """Installed versions of the libraries that shape a run's speed."""
    found = {}
    for name in PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = "not installed"
    return found
