"""Shared fixtures: the bundled model, a studio on a temporary database, fake GPUs."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch

from studio import devices


@pytest.fixture(autouse=True)
def _fresh_hardware():
    devices.detect.cache_clear()
    yield
    devices.detect.cache_clear()


@pytest.fixture
def fake_gpus(monkeypatch):
    """Pretend the machine has N functional CUDA GPUs of a given compute capability."""

    def install(count: int = 2, major: int = 8):
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        gpus = tuple(devices.GPU(i, f"Fake GPU {i}", 24 * 2**30, (major, 0)) for i in range(count))
        monkeypatch.setattr(devices, "_probe_cuda", lambda: (True, "ok", gpus))
        devices.detect.cache_clear()
        return devices.detect()

    return install


@pytest.fixture
def studio(tmp_path):
    from studio.service import Studio

    return Studio(db_path=tmp_path / "runs.db", outputs=tmp_path / "out")
