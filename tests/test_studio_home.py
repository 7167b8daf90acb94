"""The studio's home: scratch folders of weights on disk, and what a killed process left there."""

from __future__ import annotations

import os
import subprocess
import sys

from studio import settings


def test_scratch_folders_of_processes_that_are_gone_are_removed(tmp_path, monkeypatch):
    monkeypatch.setenv("STUDIO_HOME", str(tmp_path))
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True)
    dead = tmp_path / f"offload-{int(gone.stdout)}-abc"
    (dead / "group.safetensors").parent.mkdir()
    (dead / "group.safetensors").write_bytes(b"0" * 1024)
    live = tmp_path / f"offload-{os.getppid()}-def"  # a process that runs (this one's parent)
    other = tmp_path / f"casting-{int(gone.stdout)}-ghi"
    live.mkdir()
    other.mkdir()
    made = settings.scratch("offload")
    assert made.parent == tmp_path and made.name.startswith(f"offload-{os.getpid()}-") and made.is_dir()
    assert not dead.exists(), "a killed process's weights on disk are removed"
    assert live.exists() and other.exists(), "a running process's folder, and other kinds, are kept"
