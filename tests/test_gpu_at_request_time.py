"""GPU only at request time: importing the app and loading weights never touch an accelerator;
the move to the GPU happens inside the request (`PipelineManager.acquire`).

Every `Module.to/.cuda`, `Tensor.to/.cuda`, `DiffusionPipeline.to` towards an accelerator and every CUDA
initialisation (`torch.cuda._lazy_init`, which creating a CUDA tensor goes through) is recorded.
"""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path
from typing import Any

import diffusers
import pytest
import torch

from studio.manager import PipelineManager
from studio.request import build_request

ROOT = Path(__file__).resolve().parent.parent
ACCELERATORS = ("cuda", "mps", "xpu")


def _accelerator(value: Any) -> bool:
    if isinstance(value, torch.device):
        return value.type in ACCELERATORS
    if isinstance(value, str):
        return value.split(":")[0] in ACCELERATORS
    if isinstance(value, torch.Tensor):
        return value.device.type in ACCELERATORS
    return isinstance(value, int) and not isinstance(value, bool)  # a bare index means a CUDA device


class MoveRecorder:
    """Wraps the moving methods; `moves` lists every call that targets an accelerator."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch):
        self.moves: list[tuple[str, tuple, dict]] = []
        for owner, name in (
            (torch.nn.Module, "to"),
            (torch.Tensor, "to"),
            (diffusers.DiffusionPipeline, "to"),
        ):
            monkeypatch.setattr(owner, name, self._to(f"{owner.__name__}.{name}", getattr(owner, name)))
        for owner in (torch.nn.Module, torch.Tensor):
            monkeypatch.setattr(owner, "cuda", self._always(f"{owner.__name__}.cuda"))
        monkeypatch.setattr(torch.cuda, "_lazy_init", self._always("torch.cuda._lazy_init"))

    def _to(self, label: str, original):
        @functools.wraps(original)
        def to(obj, *args, **kwargs):
            if any(_accelerator(a) for a in (*args, kwargs.get("device"))):
                self.moves.append((label, args, kwargs))
                return obj
            return original(obj, *args, **kwargs)

        return to

    def _always(self, label: str):
        def record(obj=None, *args, **kwargs):
            self.moves.append((label, args, kwargs))
            return obj

        return record


def _import_app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("STUDIO_HOME", str(tmp_path / "home"))
    spec = importlib.util.spec_from_file_location("app_under_test", ROOT / "app.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _request(device: str):
    return build_request(model="tiny-shapes", prompt="a red circle", seed=1, steps=2, device=device)


@pytest.mark.parametrize("gpus", [0, 2], ids=["cpu-only", "two-fake-gpus"])
def test_import_and_load_never_touch_an_accelerator(gpus, fake_gpus, tmp_path, monkeypatch):
    if gpus:
        hw = fake_gpus(gpus)
        assert hw.device_names[0] == "cuda:0"
    recorder = MoveRecorder(monkeypatch)
    app = _import_app(tmp_path, monkeypatch)
    assert app.demo is not None
    manager = PipelineManager()
    with manager.acquire(_request("cpu")) as prepared:
        assert prepared.entry.device == "cpu" and manager.disk_loads == 1
        assert {p.device.type for p in prepared.pipe.unet.parameters()} == {"cpu"}
    assert recorder.moves == []


def test_the_move_to_the_gpu_happens_inside_the_request(fake_gpus, monkeypatch):
    fake_gpus(2)
    events: list[tuple[str, Any]] = []
    recorder = MoveRecorder(monkeypatch)

    def pipe_to(pipe, *args, **kwargs):
        events.append(("pipe.to", args))
        return pipe

    monkeypatch.setattr(diffusers.DiffusionPipeline, "to", pipe_to)
    from pipelines import loader

    def load(spec, **kwargs):
        pipe = loader.load(spec, **kwargs)
        events.append(("load", spec.id))
        return pipe

    manager = PipelineManager(load=load)
    request = _request("cuda:0")
    assert request.device == "cuda:0" and events == []
    with manager.acquire(request) as prepared:
        assert events == [("load", "tiny-shapes"), ("pipe.to", ("cuda:0",))]
        assert prepared.entry.device == "cuda:0"
    with manager.acquire(request):
        assert len(events) == 2, "an already placed pipeline is neither reloaded nor moved again"
    assert recorder.moves == [], "nothing but the intercepted pipe.to may target the GPU"


def test_after_an_offload_the_next_plain_request_is_on_the_gpu_again(fake_gpus, monkeypatch):
    """An offload moves the modules back to the CPU and hooks them; once the request no longer asks for it,
    the pipeline is rebuilt from the cached components and must be moved to the GPU again, not run on
    the CPU because the manager still believes it is placed."""
    fake_gpus(1)
    moves: list[tuple] = []
    monkeypatch.setattr(diffusers.DiffusionPipeline, "to", lambda pipe, *a, **k: moves.append(a) or pipe)

    def offload(pipe, device=None, **kwargs):  # what diffusers does: modules to the CPU, hooks on
        moves.append(("offload", device))

    monkeypatch.setattr(diffusers.DiffusionPipeline, "enable_model_cpu_offload", offload)
    manager = PipelineManager()
    plain = _request("cuda:0")
    offloaded = build_request(
        model="tiny-shapes",
        prompt="a red circle",
        seed=1,
        steps=2,
        device="cuda:0",
        optimizations=["model_cpu_offload"],
    )
    for request in (plain, offloaded, plain):
        with manager.acquire(request):
            pass
    assert moves == [("cuda:0",), ("offload", "cuda:0"), ("cuda:0",)]


def test_the_recorder_sees_every_kind_of_move(monkeypatch):
    recorder = MoveRecorder(monkeypatch)
    layer = torch.nn.Linear(2, 2)
    layer.to(torch.float64)
    torch.ones(1).to("cpu")
    assert recorder.moves == []
    layer.to("cuda:0")
    layer.cuda()
    torch.ones(1).to(device=torch.device("cuda", 1))
    torch.ones(1).cuda()
    with pytest.raises((RuntimeError, AssertionError, TypeError)):
        torch.zeros(1, device="cuda")  # CUDA initialisation goes through the recorded _lazy_init first
    assert [label for label, _, _ in recorder.moves] == [
        "Module.to",
        "Module.cuda",
        "Tensor.to",
        "Tensor.cuda",
        "torch.cuda._lazy_init",
    ]
