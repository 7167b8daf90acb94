"""Device detection and resolution, with CUDA faked where the machine has none."""


import pytest
import torch

from studio import devices
from studio.errors import UnavailableError


def test_auto_resolves_to_cpu_without_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    hw = devices.detect()
    assert not hw.cuda_functional and "no CUDA" in hw.cuda_reason
    assert devices.resolve("auto") == "cpu"
    with pytest.raises(UnavailableError, match="not available.*auto"):
        devices.resolve("cuda:0")


def test_importable_but_broken_cuda_is_not_functional(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    real_zeros = torch.zeros

    def zeros(*a, device=None, **k):
        if device == "cuda":
            raise RuntimeError("CUDA driver version is insufficient")
        return real_zeros(*a, device=device, **k)

    monkeypatch.setattr(torch, "zeros", zeros)
    hw = devices.detect()
    assert not hw.cuda_functional
    assert "driver version" in hw.cuda_reason
    assert devices.resolve("auto") == "cpu"


def test_fake_gpus_resolve_and_report(monkeypatch, fake_gpus):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    fake_gpus(2)
    hw = devices.detect()
    assert hw.device_names[:2] == ["cuda:0", "cuda:1"]
    assert devices.resolve("auto") == "cuda:0"
    assert devices.resolve("cuda") == "cuda:0"
    summary = hw.summary()
    assert summary["gpus"][1]["bf16"] and summary["cuda_visible_devices"] == "0,1"


def test_cpu_features_are_read():
    hw = devices.detect()
    assert hw.cpu_count >= 1
    assert isinstance(hw.avx512, bool) and isinstance(hw.amx_bf16, bool)
    assert "cpu" in hw.device_names


def test_summary_is_json_friendly():
    import json

    json.dumps(devices.detect().summary())


def test_gpu_capability_flags():
    old = devices.GPU(0, "T4", 16 * 2**30, (7, 5))
    assert not old.supports_bf16 and not old.supports_tf32
