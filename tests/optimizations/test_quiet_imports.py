"""The optional accelerators' import noise is kept out of stderr, but a torchao that cannot be imported is
said, once, as a warning, and the studio's techniques still load."""

from __future__ import annotations

import importlib
import logging

import pytest

from studio.optimizations import _quiet


def test_a_broken_torchao_is_said_and_does_not_stop_the_studio(monkeypatch, caplog):
    if importlib.util.find_spec("torchao") is None:
        pytest.skip("torchao is not installed")
    real = importlib.import_module

    def broken(name, *args, **kwargs):
        if name.startswith("torchao"):
            raise RuntimeError("undefined symbol in _C.so")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(importlib, "import_module", broken)
    with caplog.at_level(logging.WARNING, logger=_quiet.__name__):
        importlib.reload(_quiet)
    assert "torchao is installed but could not be imported (RuntimeError: undefined symbol" in caplog.text
