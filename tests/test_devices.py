"""Device detection and resolution, with CUDA faked where the machine has none."""

import os
from pathlib import Path

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


def _proc_cpuinfo() -> tuple[str, frozenset[str]]:
    """The first "model name" and "flags" lines of /proc/cpuinfo, read here independently of
    studio.devices."""
    text = Path("/proc/cpuinfo").read_text()
    fields = {}
    for line in reversed(text.splitlines()):  # reversed: the first processor's lines win
        key, _, value = line.partition(":")
        fields[key.strip()] = value.strip()
    return fields["model name"], frozenset(fields["flags"].split())


@pytest.mark.skipif(not Path("/proc/cpuinfo").is_file(), reason="no /proc/cpuinfo on this OS")
def test_cpu_model_and_flags_are_read_from_the_machine():
    hw = devices.detect()
    model, flags = _proc_cpuinfo()
    assert (hw.cpu_model, hw.cpu_flags) == (model, flags)
    assert hw.avx512 == ("avx512f" in flags) and hw.amx_bf16 == ("amx_bf16" in flags)
    assert hw.cpu_count == os.cpu_count() and "cpu" in hw.device_names


@pytest.mark.parametrize(
    "flags, avx512, amx",
    [
        ({"avx2"}, False, False),
        ({"avx2", "avx512f"}, True, False),
        ({"avx2", "avx512f", "amx_bf16", "amx_int8"}, True, True),
    ],
)
def test_cpu_abilities_follow_the_flags(monkeypatch, flags, avx512, amx):
    monkeypatch.setattr(devices, "_cpu_info", lambda: ("Some CPU", frozenset(flags)))
    summary = devices.detect().summary()
    assert (summary["cpu"], summary["avx512"], summary["amx_bf16"]) == ("Some CPU", avx512, amx)


def test_summary_is_json_friendly(fake_gpus):
    import json

    fake_gpus(2)
    summary = devices.detect().summary()
    assert json.loads(json.dumps(summary)) == summary
    assert summary["devices"] == ["cuda:0", "cuda:1", "cpu"] and summary["gpus"][0]["capability"] == "8.0"


def test_gpu_capability_flags():
    old = devices.GPU(0, "T4", 16 * 2**30, (7, 5))
    assert not old.supports_bf16 and not old.supports_tf32
