"""Compiled packages on ZeroGPU, across a real fork: each request's GPU work runs in a forked worker that
keeps nothing, so the first request's worker compiles the package and keeps it on disk, and every later
request's worker loads it without compiling; a just-in-time compile is refused there with a sentence that
names the way that works. The real `spaces` package (installed from the package index) is a no-op off a
Space."""

from __future__ import annotations

import os
import pickle
import sys
import types

import pytest

from studio.engine import zerogpu


class ForkingSpaces(types.ModuleType):
    """`spaces` as ZeroGPU runs a decorated call: in a forked child process, its result (or its exception)
    pickled back through a pipe; the duration callable is asked first, in the caller."""

    def __init__(self) -> None:
        super().__init__("spaces")
        self.durations: list[int] = []
        self.workers: list[int] = []

    def GPU(self, task=None, *, duration=None, size=None):  # noqa: N802  (the real API's name)
        def decorate(fn):
            def handler(*args, **kwargs):
                self.durations.append(duration(*args, **kwargs))
                read, write = os.pipe()
                pid = os.fork()
                if pid == 0:  # the worker: run, send the result, leave without running the parent's cleanup
                    os.close(read)
                    with os.fdopen(write, "wb") as out:
                        out.write(pickle.dumps(fn(*args, **kwargs)))
                    os._exit(0)
                os.close(write)
                with os.fdopen(read, "rb") as result:
                    data = result.read()
                os.waitpid(pid, 0)
                self.workers.append(pid)
                return pickle.loads(data)

            return handler

        return decorate if task is None else decorate(task)


@pytest.fixture
def zerogpu_space(monkeypatch, tmp_path, one_torch_thread):
    spaces = ForkingSpaces()
    monkeypatch.setitem(sys.modules, "spaces", spaces)
    monkeypatch.setenv("SPACES_ZERO_GPU", "true")
    monkeypatch.setenv("STUDIO_HOME", str(tmp_path / "home"))
    return spaces


@pytest.mark.slow  # one C++ compile of the bundled model's UNet
def test_the_first_request_compiles_in_its_worker_and_later_workers_load_the_package(zerogpu_space, tmp_path):
    from studio.engine import Studio
    from studio.request import build_request

    studio = Studio(db_path=tmp_path / "runs.db", outputs=tmp_path / "out")
    request = build_request(
        model="tiny-shapes",
        prompt="a red circle",
        seed=1,
        steps=2,
        device="cpu",
        optimizations=["aot_package"],
    )
    first = studio.generate(request)
    second = studio.generate(request)
    assert len(set(zerogpu_space.workers)) == 2 and os.getpid() not in zerogpu_space.workers
    assert first.metrics["first_call_phase"] == "cold", "the first request's worker compiles"
    assert second.metrics["first_call_phase"] == "package", "a later worker loads the kept package"
    assert not second.metrics["stats"].get("compile_count"), "nothing is compiled in the later worker"
    assert zerogpu_space.durations[0] >= zerogpu_space.durations[1] + zerogpu.COMPILE_SECONDS - 1, (
        "the compiling request asks for the compile's time too; later ones do not"
    )
    assert first.images[0].tobytes() == second.images[0].tobytes(), "the package computes what was compiled"
    logged = studio.runlog.get_run(second.run_id)
    assert (logged["first_call_phase"], logged["status"]) == ("package", "ok"), "logged by the caller"


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
