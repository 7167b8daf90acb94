"""Start the real app (app.py) in a subprocess on a free port, for client and browser tests."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests import warm_python

ROOT = Path(__file__).resolve().parent.parent


GENERATE_PROMPT = "a big purple triangle at the bottom, on a white background"


def generate_args(steps: int = 4, seed: int = 1, model: str = "tiny-shapes") -> tuple:
    """`/generate`'s inputs for a `gradio_client` call, in the order of the Generate form."""
    return (model, "", "auto", "fp32", [], GENERATE_PROMPT, "", seed, steps, 6.0, 64, 64, "default", "")


def studio_environment(**env: str) -> dict[str, str]:
    """This process's environment without the user's studio settings (every STUDIO_* variable: a STUDIO_DB
    or STUDIO_HOME of the user's must not become the test's run log), with `env` on top."""
    return {**{k: v for k, v in os.environ.items() if not k.startswith("STUDIO_")}, **env}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """The studio as a user runs it: `python app.py`, its own database under `home`, from a clean studio
    environment (`studio_environment`: the STUDIO_* variables are `home`, the port and `env`'s)."""

    def __init__(self, home: Path, **env: str):
        self.home = home
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/"
        self.env = studio_environment(
            STUDIO_HOME=str(home),
            STUDIO_PORT=str(self.port),
            HF_HUB_OFFLINE="1",
            GRADIO_ANALYTICS_ENABLED="False",
            **env,
        )
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 180, path: str = "gradio_api/info") -> Server:
        """Start and wait until `path` answers (any status below 500 when auth may refuse it)."""
        log = open(self.home / "server.log", "ab")  # noqa: SIM115 (closed with the process)
        self.proc = warm_python.Popen(
            [sys.executable, "app.py"], cwd=ROOT, env=self.env, stdout=log, stderr=log
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the app exited with {self.proc.returncode}: {self.log()[-2000:]}")
            try:
                if httpx.get(self.url + path, timeout=2).status_code < 500:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise TimeoutError(f"the app did not answer within {timeout}s: {self.log()[-2000:]}")

    def log(self) -> str:
        return (self.home / "server.log").read_text(errors="replace")

    def stop(self, sig: int | None = None) -> None:
        if self.proc and self.proc.poll() is None:
            if sig is None:
                self.proc.terminate()
            else:
                self.proc.send_signal(sig)
            self.proc.wait(timeout=30)
