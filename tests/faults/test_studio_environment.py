"""The servers and fault cases of the tests start from a clean studio environment: a user's STUDIO_DB (or
any STUDIO_* setting) never reaches the app a test starts, so its run log is the test's own."""

from __future__ import annotations

import os
from unittest import mock

from benchmarks.faults import forget_studio_settings
from tests.server import Server


def test_a_test_server_ignores_the_users_studio_settings(tmp_path, monkeypatch):
    monkeypatch.setenv("STUDIO_DB", str(tmp_path / "the-users-runs.db"))
    monkeypatch.setenv("STUDIO_QUEUE_MAX", "64")
    server = Server(tmp_path / "home", STUDIO_QUEUE_MAX="2")
    studio = {k: v for k, v in server.env.items() if k.startswith("STUDIO_")}
    assert studio == {
        "STUDIO_HOME": str(tmp_path / "home"),
        "STUDIO_PORT": str(server.port),
        "STUDIO_QUEUE_MAX": "2",
    }
    assert server.env["PATH"] == os.environ["PATH"], "the rest of the environment is kept"


def test_the_fault_table_forgets_the_users_studio_settings(tmp_path, monkeypatch):
    monkeypatch.setenv("STUDIO_DB", str(tmp_path / "the-users-runs.db"))
    monkeypatch.setenv("STUDIO_HOME", str(tmp_path / "the-users-home"))
    with mock.patch.dict(os.environ):  # the whole environment comes back afterwards
        forget_studio_settings()
        assert not [k for k in os.environ if k.startswith("STUDIO_")] and "PATH" in os.environ
