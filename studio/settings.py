"""Where the studio keeps its database and images, and library versions for the run log."""

from __future__ import annotations

import functools
import os
import shutil
import tempfile
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


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def scratch(kind: str) -> Path:
    """A new folder under the studio's home for this process's `kind` of files (weights on disk while a
    technique is applied), named `kind-<pid>-...`; the folders of `kind` left by processes that no longer run
    (killed before they could revert) are removed first."""
    root = home()
    root.mkdir(parents=True, exist_ok=True)
    for old in root.glob(f"{kind}-*-*"):
        pid = old.name.split("-")[1]
        if old.is_dir() and pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(old, ignore_errors=True)
    return Path(tempfile.mkdtemp(prefix=f"{kind}-{os.getpid()}-", dir=root))
