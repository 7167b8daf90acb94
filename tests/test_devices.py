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


def _proc_cpuinfo() -> dict[str, str]:
    """The first processor's lines of /proc/cpuinfo, read here independently of studio.devices."""
    text = Path("/proc/cpuinfo").read_text()
    fields = {}
    for line in reversed(text.split("\n\n")[0].splitlines()):
        key, _, value = line.partition(":")
        fields[key.strip()] = value.strip()
    return fields


@pytest.mark.skipif(not Path("/proc/cpuinfo").is_file(), reason="no /proc/cpuinfo on this OS")
def test_cpu_model_flags_and_generation_are_read_from_the_machine():
    hw = devices.detect()
    cpu = _proc_cpuinfo()
    flags = frozenset(cpu.get("flags", "").split())
    assert (hw.cpu_model, hw.cpu_flags) == (cpu.get("model name", hw.cpu_model), flags)
    assert hw.avx512 == ("avx512f" in flags) and hw.amx_bf16 == ("amx_bf16" in flags)
    assert hw.cpu_count == os.cpu_count() and "cpu" in hw.device_names
    if "cpu family" in cpu:  # x86: the name says which generation, whatever the model name hides
        generation = f"family {cpu['cpu family']} model {cpu['model']} stepping {cpu['stepping']}"
        assert hw.cpu_name.startswith(f"{hw.cpu_model} ({generation}")


@pytest.mark.parametrize(
    "flags, avx512, amx, kernels",
    [
        ({"avx2", "fma"}, False, False, ["avx2"]),
        ({"avx2", "avx512f", "avx512_vnni"}, True, False, ["avx2", "avx512f", "avx512_vnni"]),
        (
            {"avx2", "avx512f", "amx_bf16", "amx_int8", "amx_tile"},
            True,
            True,
            ["avx2", "avx512f", "amx_bf16", "amx_int8"],
        ),
    ],
)
def test_cpu_abilities_follow_the_flags(monkeypatch, flags, avx512, amx, kernels):
    monkeypatch.setattr(
        devices, "_cpu_info", lambda: ("Some CPU", frozenset(flags), "family 6 model 143 stepping 8")
    )
    summary = devices.detect().summary()
    assert (summary["cpu"], summary["avx512"], summary["amx_bf16"]) == ("Some CPU", avx512, amx)
    assert summary["cpu_kernels"] == kernels
    assert devices.detect().cpu_name == f"Some CPU (family 6 model 143 stepping 8; {' '.join(kernels)})"


def test_two_generations_behind_one_model_name_are_named_apart(monkeypatch):
    """A VM's "AMD EPYC" is a Zen 3 (family 25 model 1) or a Zen 4 (model 17), with or without AVX-512
    shown: figures, the run log and the caches of what was timed on a CPU must tell them apart."""
    names = set()
    for signature, flags in [
        ("family 25 model 1 stepping 1", {"avx2"}),
        ("family 25 model 17 stepping 1", {"avx2"}),
        ("family 25 model 17 stepping 1", {"avx2", "avx512f", "avx512_vnni", "avx512_bf16"}),
    ]:
        monkeypatch.setattr(devices, "_cpu_info", lambda s=signature, f=flags: ("AMD EPYC", frozenset(f), s))
        devices.detect.cache_clear()
        names.add(devices.detect().cpu_name)
    assert len(names) == 3
    monkeypatch.setattr(devices, "_cpu_info", lambda: ("Apple M2", frozenset(), ""))
    devices.detect.cache_clear()
    assert devices.detect().cpu_name == "Apple M2"


def test_summary_is_json_friendly(fake_gpus):
    import json

    fake_gpus(2)
    summary = devices.detect().summary()
    assert json.loads(json.dumps(summary)) == summary
    assert summary["devices"] == ["cuda:0", "cuda:1", "cpu"] and summary["gpus"][0]["capability"] == "8.0"


def test_gpu_capability_flags():
    old = devices.GPU(0, "T4", 16 * 2**30, (7, 5))
    assert not old.supports_bf16 and not old.supports_tf32
