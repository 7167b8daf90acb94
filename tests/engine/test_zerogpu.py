"""ZeroGPU: wrapped only on ZeroGPU, duration from the request, results and errors cross the worker boundary,
the run log is written by the caller, and `import spaces` comes before torch."""

from __future__ import annotations

import functools
import logging
import os
import pickle
import subprocess
import sys
import types
from dataclasses import dataclass
from pathlib import Path

import pytest

from studio.engine import zerogpu
from studio.engine.run_data import RunOptions
from studio.errors import ValidationError

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Req:
    """The attributes of a GenerationRequest the duration estimate reads."""

    model: str = "sd15"
    steps: int = 30
    width: int = 512
    height: int = 512
    optimizations: tuple[str, ...] = ()


class StandInSpaces(types.ModuleType):
    """Behaves like `spaces` on ZeroGPU where it matters: the duration callable gets the call's arguments;
    arguments and results are pickled (they cross to a forked worker); `in_worker` is True while the
    task runs, as if in the worker process."""

    def __init__(self) -> None:
        super().__init__("spaces")
        self.calls: list[dict] = []
        self.in_worker = False

    def GPU(self, task=None, *, duration=None, size=None):  # noqa: N802  (the real API's name)
        def decorate(fn):
            @functools.wraps(fn)
            def handler(*args, **kwargs):
                seconds = duration(*args, **kwargs) if callable(duration) else duration
                self.calls.append({"args": args, "kwargs": kwargs, "duration": seconds})
                args, kwargs = pickle.loads(pickle.dumps((args, kwargs)))
                self.in_worker = True
                try:
                    result = fn(*args, **kwargs)
                finally:
                    self.in_worker = False
                return pickle.loads(pickle.dumps(result))

            return handler

        return decorate if task is None else decorate(task)


@pytest.fixture
def standin(monkeypatch) -> StandInSpaces:
    module = StandInSpaces()
    monkeypatch.setitem(sys.modules, "spaces", module)
    return module


@pytest.fixture
def zero(monkeypatch, standin) -> StandInSpaces:
    monkeypatch.setenv("SPACES_ZERO_GPU", "true")
    return standin


def compute(request: Req, options: RunOptions = RunOptions()) -> dict:
    return {"model": request.model, "calls": options.warmup + options.rounds, "pid": os.getpid()}


@pytest.mark.parametrize(
    ("value", "expected"),
    [("true", True), ("1", True), ("True", True), ("false", False), ("", False), (None, False)],
)
def test_on_zerogpu_reads_the_environment(monkeypatch, value, expected):
    if value is None:
        monkeypatch.delenv("SPACES_ZERO_GPU", raising=False)
    else:
        monkeypatch.setenv("SPACES_ZERO_GPU", value)
    assert zerogpu.on_zerogpu() is expected


def test_off_spaces_nothing_is_wrapped(monkeypatch, standin):
    monkeypatch.delenv("SPACES_ZERO_GPU", raising=False)
    assert zerogpu.gpu_wrapper(compute, zerogpu.request_duration) is compute
    assert zerogpu.ensure_spaces() is None
    assert compute(Req(), RunOptions(warmup=1, rounds=2))["calls"] == 3 and standin.calls == []


def test_on_zerogpu_the_function_is_wrapped_and_duration_sees_the_request(zero):
    wrapped = zerogpu.gpu_wrapper(compute, zerogpu.request_duration)
    assert wrapped is not compute and wrapped.zerogpu is True
    request = Req(model="sdxl", steps=30, width=1024, height=1024)
    options = RunOptions(warmup=1, rounds=3)
    result = wrapped(request, options)
    assert result["model"] == "sdxl" and result["calls"] == 4
    [call] = zero.calls
    assert call["args"] == (request, options) and call["kwargs"] == {}
    assert call["duration"] == zerogpu.estimate_duration("sdxl", 30, 1024, 1024, rounds=3, warmup=1)


def test_a_worker_error_comes_back_as_the_same_sentence(zero):
    def failing(request: Req) -> None:
        raise ValidationError(f"steps must be a whole number between 1 and 200, not {request.steps}.")

    wrapped = zerogpu.gpu_wrapper(failing, zerogpu.request_duration)
    with pytest.raises(ValidationError, match="not 0"):
        wrapped(Req(steps=0))


class RunLog:
    """A stand-in run log that refuses writes made from inside the GPU worker."""

    def __init__(self, spaces: StandInSpaces) -> None:
        self.spaces = spaces
        self.rows: list[tuple[str, object]] = []

    def write(self, status: str, value: object = None) -> None:
        assert not self.spaces.in_worker, "the run log was written inside the @spaces.GPU function"
        self.rows.append((status, value))


def test_logging_happens_in_the_caller_not_in_the_wrapped_function(zero):
    runlog = RunLog(zero)
    wrapped = zerogpu.gpu_wrapper(compute, zerogpu.request_duration)
    runlog.write("running")
    result = wrapped(Req(), RunOptions(rounds=2))
    runlog.write("ok", result)
    assert [status for status, _ in runlog.rows] == ["running", "ok"] and zero.calls

    def logs_inside(request: Req) -> None:  # the design this module exists to prevent
        runlog.write("ok")

    with pytest.raises(AssertionError, match="inside the @spaces.GPU function"):
        zerogpu.gpu_wrapper(logs_inside, zerogpu.request_duration)(Req())


def test_estimate_formula_and_clamping():
    assert zerogpu.estimate_duration("sd15", 50, 512, 512, rounds=1) == 21  # 1.5 * (10 + 50 * 0.08)
    assert zerogpu.estimate_duration("tiny-shapes", 20, 64, 64) == zerogpu.MIN_SECONDS
    assert zerogpu.estimate_duration("sdxl", 200, 2048, 2048, rounds=10, warmup=2) == zerogpu.MAX_SECONDS
    base = zerogpu.estimate_duration("sdxl", 20, 1024, 1024)
    assert zerogpu.estimate_duration("sdxl", 40, 1024, 1024) > base
    assert zerogpu.estimate_duration("sdxl", 20, 1024, 1024, rounds=3) > base
    assert zerogpu.estimate_duration("sdxl", 20, 512, 512) < base
    assert zerogpu.estimate_duration("someone/unknown-model", 20, 1024, 1024) >= base


def test_portable_callbacks(zero, caplog):
    with caplog.at_level(logging.WARNING, logger="studio.engine.zerogpu"):
        assert zerogpu.portable(lambda i, n: None, "progress") is None
    assert "progress cannot cross" in caplog.text
    keep = functools.partial(print, "step")
    assert zerogpu.portable(keep) is keep and zerogpu.portable(None) is None


def test_portable_keeps_everything_off_spaces(monkeypatch):
    monkeypatch.delenv("SPACES_ZERO_GPU", raising=False)

    def callback(i, n):
        return None

    assert zerogpu.portable(callback) is callback


def test_a_spaces_without_gpu_is_refused(monkeypatch):
    monkeypatch.setenv("SPACES_ZERO_GPU", "true")
    monkeypatch.setitem(sys.modules, "spaces", types.ModuleType("spaces"))
    with pytest.raises(ImportError, match="no GPU decorator"):
        zerogpu.gpu_wrapper(compute, zerogpu.request_duration)


def test_import_spaces_happens_first_and_torch_is_not_imported(tmp_path):
    (tmp_path / "spaces.py").write_text(
        "import sys\nTORCH_ALREADY_IMPORTED = 'torch' in sys.modules\n"
        "def GPU(task=None, *, duration=None, size=None):\n    return task\n"
    )
    code = (
        "import sys, studio.engine.zerogpu; import spaces; "
        "print(spaces.TORCH_ALREADY_IMPORTED, 'torch' in sys.modules, spaces.__file__)"
    )
    env = dict(os.environ, SPACES_ZERO_GPU="true", PYTHONPATH=str(tmp_path))
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=True
    )
    torch_first, torch_loaded, where = out.stdout.split()
    assert (torch_first, torch_loaded) == ("False", "False") and where == str(tmp_path / "spaces.py")


def test_studio_runs_the_compute_under_spaces_gpu_and_logs_outside(zero, tmp_path, monkeypatch):
    from studio.engine import Studio
    from studio.request import build_request
    from studio.runlog import RunLog as RealRunLog

    writes: list[str] = []
    for name in ("start_run", "finish_run"):
        original = getattr(RealRunLog, name)

        def guarded(self, *args, _original=original, _name=name, **kwargs):
            assert not zero.in_worker, f"{_name} ran inside the @spaces.GPU function"
            writes.append(_name)
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(RealRunLog, name, guarded)
    studio = Studio(db_path=tmp_path / "runs.db", outputs=tmp_path / "out")
    request = build_request(model="tiny-shapes", prompt="a red circle", seed=1, steps=2, device="cpu")
    result = studio.generate(request, on_step=lambda i, n: None)
    [call] = zero.calls
    assert call["args"][0] == request and call["duration"] == zerogpu.request_duration(request)
    assert writes == ["start_run", "finish_run"]
    assert studio.runlog.get_run(result.run_id)["status"] == "ok"
