"""Compiled packages on ZeroGPU, across a real fork: each request's GPU work runs in a forked worker that
keeps nothing, so the first request's worker compiles the package and keeps it on disk, and every later
request's worker loads it without compiling; a just-in-time compile is refused there with a sentence that
names the way that works. The real `spaces` package (installed from the package index) is a no-op off a
Space."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from studio.engine import zerogpu

SCENARIO = """
import json, os, sys
from tests.engine.forking_spaces import ForkingSpaces
spaces = sys.modules["spaces"] = ForkingSpaces()
from studio.engine import Studio, zerogpu
from studio.request import build_request
studio = Studio(db_path=sys.argv[1] + "/runs.db", outputs=sys.argv[1] + "/out")
request = build_request(
    model="tiny-shapes", prompt="a red circle", seed=1, steps=2, device="cpu", optimizations=["aot_package"]
)
first, second = studio.generate(request), studio.generate(request)
logged = studio.runlog.get_run(second.run_id)
print(json.dumps({
    "workers": spaces.workers, "me": os.getpid(), "durations": spaces.durations,
    "allowance": zerogpu.COMPILE_SECONDS,
    "phases": [first.metrics.get("first_call_phase"), second.metrics.get("first_call_phase")],
    "compiled_in_second": second.metrics["stats"].get("compile_count"),
    "same_image": first.images[0].tobytes() == second.images[0].tobytes(),
    "logged": [logged["first_call_phase"], logged["status"]],
}))
"""


@pytest.mark.slow  # one C++ compile of the bundled model's UNet
def test_the_first_request_compiles_in_its_worker_and_later_workers_load_the_package(tmp_path):
    """In a process of its own, as a Space's is: a studio that has imported torch and nothing else forks each
    request's worker (a process that ran other libraries' thread pools may not fork safely)."""
    env = {
        **os.environ,
        "SPACES_ZERO_GPU": "true",
        "STUDIO_HOME": str(tmp_path / "home"),
        "OMP_NUM_THREADS": "1",
    }
    done = subprocess.run(
        [sys.executable, "-c", SCENARIO, str(tmp_path)],
        cwd=Path(__file__).resolve().parents[2],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(set(seen["workers"])) == 2 and seen["me"] not in seen["workers"]
    assert seen["phases"] == ["cold", "package"], "the first worker compiles, a later one loads the package"
    assert not seen["compiled_in_second"], "nothing is compiled in the later worker"
    assert seen["durations"][0] >= seen["durations"][1] + seen["allowance"] - 1, (
        "the compiling request asks for the compile's time too; later ones do not"
    )
    assert seen["same_image"], "the package computes what was compiled"
    assert seen["logged"] == ["package", "ok"], "logged by the caller"


def test_a_just_in_time_compile_is_refused_on_zerogpu_with_the_way_that_works(monkeypatch):
    from studio import devices
    from studio.optimizations import REGISTRY, unavailable_reason

    monkeypatch.setenv("SPACES_ZERO_GPU", "true")
    for name in ("torch_compile", "jit_trace_unet"):
        reason = unavailable_reason(REGISTRY[name], devices.detect(), "cpu")
        assert reason and "ZeroGPU" in reason and "aot_package" in reason, (name, reason)
    assert unavailable_reason(REGISTRY["aot_package"], devices.detect(), "cpu") is None
    monkeypatch.delenv("SPACES_ZERO_GPU")
    assert unavailable_reason(REGISTRY["torch_compile"], devices.detect(), "cpu") is None


def test_the_real_spaces_package_leaves_the_function_alone_off_a_space(monkeypatch):
    spaces = pytest.importorskip("spaces", reason="the spaces package is installed by requirements-dev.txt")
    monkeypatch.delenv("SPACES_ZERO_GPU", raising=False)

    def compute(x: int) -> int:
        return x + 1

    assert zerogpu.gpu_wrapper(compute, lambda *a: 15) is compute, "off ZeroGPU nothing is wrapped"
    assert spaces.GPU(duration=15)(compute)(1) == 2, "the real decorator runs the function off a Space"
