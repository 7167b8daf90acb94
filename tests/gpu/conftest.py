"""The GPU tests: every test marked `gpu` is skipped, with the reason, where PyTorch sees no CUDA device; on
an offline GPU machine `python3 -m pytest -m gpu tests/gpu -q` runs them (benchmarks/gpu/run.sh does)."""

from __future__ import annotations

import pytest
import torch


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU: torch.cuda.is_available() is false here")
    for item in items:
        if item.get_closest_marker("gpu") is not None:
            item.add_marker(skip)
