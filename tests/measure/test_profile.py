"""One denoising step under torch.profiler: the kinds add up, the UNet's convolutions and matmuls show, FLOPs
and the fraction of the measured matmul peak are sane, the classifier table names known operators, and the
CUDA branch (device times, synchronisation) behaves, checked with fakes."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from torch.autograd import DeviceType

from studio.errors import ValidationError
from studio.manager import PipelineManager
from studio.measure import bench, step_profile
from studio.measure.op_kinds import op_stats, split_by_kind
from studio.report import profile_text
from studio.request import build_request

PROMPT = "a big red circle on the left, on a white background"

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def request(**kw):
    return build_request(
        **{"model": "tiny-shapes", "prompt": PROMPT, "seed": 1, "steps": 4, "width": 64, "height": 64, **kw}
    )


@pytest.fixture(scope="module")
def manager():
    return PipelineManager()


@pytest.mark.parametrize(
    "name, kind",
    [
        ("aten::conv2d", "convolution"),
        ("aten::mkldnn_convolution", "convolution"),
        ("aten::_slow_conv2d_forward", "convolution"),
        ("aten::cudnn_convolution", "convolution"),
        ("aten::addmm", "matmul"),
        ("aten::mm", "matmul"),
        ("aten::linear", "matmul"),
        ("onednn::qlinear_pointwise", "matmul"),
        ("aten::scaled_dot_product_attention", "attention"),
        ("aten::_scaled_dot_product_flash_attention_for_cpu", "attention"),
        ("aten::_efficient_attention_forward", "attention"),
        ("aten::_softmax", "attention"),
        ("aten::baddbmm", "attention"),
        ("aten::bmm", "attention"),
        ("aten::native_group_norm", "norm"),
        ("aten::native_layer_norm", "norm"),
        ("aten::add", "elementwise"),
        ("aten::add_", "elementwise"),
        ("aten::mul", "elementwise"),
        ("aten::silu", "elementwise"),
        ("aten::gelu", "elementwise"),
        ("aten::addcmul", "elementwise"),
        ("aten::copy_", "copy"),
        ("aten::_to_copy", "copy"),
        ("aten::contiguous", "copy"),
        ("aten::cat", "copy"),
        ("aten::view", "other"),
        ("aten::as_strided", "other"),
        ("aten::upsample_nearest2d", "other"),
        ("aten::_convert_indices_from_coo_to_csr", "other"),
    ],
)
def test_the_classifier_table_names_known_operators(name, kind):
    assert step_profile.classify(name) == kind


def test_one_step_of_the_unet_splits_into_kinds_that_add_up(manager):
    data = step_profile.profile_step(manager, request()).as_json()
    kinds = {k["kind"]: k for k in data["kinds"]}
    assert list(kinds) == list(step_profile.KINDS)
    assert sum(k["seconds"] for k in kinds.values()) == pytest.approx(data["step_s"], abs=1e-5)
    assert sum(k["share"] for k in kinds.values()) == pytest.approx(1.0, abs=1e-3)
    assert kinds["convolution"]["seconds"] > 0 and kinds["matmul"]["seconds"] > 0
    assert all(kinds[k]["flops"] > 0 for k in ("convolution", "matmul", "attention"))
    assert data["flops"] == sum(k["flops"] for k in kinds.values()) > 0
    assert 0 < data["peak_fraction"] < 1 and data["peak_flops_per_s"] > data["achieved_flops_per_s"] > 0
    assert data["unprofiled_step_s"] > 0 and data["achieved_over"].startswith("step 3")
    shares = [op["share"] for op in data["top_ops"]]
    assert shares == sorted(shares, reverse=True) and len(shares) == step_profile.TOP
    assert {"aten::addmm", "aten::mkldnn_convolution"} <= {op["name"] for op in data["top_ops"]}
    assert data["top_ops"][0]["self_cuda_s"] is None and data["time_basis"] == "CPU self time"


def test_flops_do_not_depend_on_the_attention_kernel(manager):
    """SDPA's FLOPs (from its shapes) equal the classic kernel's counted bmm/baddbmm FLOPs, and the
    technique reaches the profiled step through the manager."""
    sdpa = step_profile.profile_step(manager, request(steps=2)).as_json()
    classic = step_profile.profile_step(
        manager, request(steps=2, optimizations=["classic_attention"])
    ).as_json()
    assert classic["applied"] == ["classic_attention"] and sdpa["unprofiled_step_s"] is None
    names = {op["name"] for op in classic["top_ops"]} | {op["name"] for op in sdpa["top_ops"]}
    assert "aten::_scaled_dot_product_flash_attention_for_cpu" in names
    attention = [{k["kind"]: k["flops"] for k in d["kinds"]}["attention"] for d in (sdpa, classic)]
    assert attention[0] == attention[1] > 0


def test_fewer_than_two_steps_are_refused_before_the_pipeline_is_touched_or_a_run_logged(studio, monkeypatch):
    """The engine's door checks a profile's request once, before it logs or loads anything."""
    monkeypatch.setattr(studio.manager, "acquire", lambda *a, **k: pytest.fail("asked for a pipeline"))
    with pytest.raises(ValidationError, match="at least 2 steps"):
        studio.profile(request(steps=1))
    assert studio.runlog.runs() == []


def test_the_peak_is_measured_once_per_device_dtype_and_thread_count(monkeypatch):
    monkeypatch.setattr(step_profile, "_peaks", {})
    first = step_profile.matmul_peak("cpu", torch.float32, size=256)
    monkeypatch.setattr(torch, "randn", lambda *a, **k: pytest.fail("measured again"))
    assert step_profile.matmul_peak("cpu", torch.float32, size=256) == first > 0


# ---- the CUDA branch, with fakes ----------------------------------------------------------------------


def event(name, device=DeviceType.CPU, cpu_us=0.0, device_us=0.0, flops=0, shapes=None, children=()):
    return SimpleNamespace(
        name=name,
        device_type=device,
        is_user_annotation=False,
        self_cpu_time_total=cpu_us,
        self_device_time_total=device_us,
        flops=flops,
        input_shapes=shapes,
        cpu_children=list(children),
    )


def test_on_cuda_kinds_are_kernel_times_and_an_idle_gpu_is_overhead():
    q = [2, 8, 64, 40]
    events = [
        event("aten::conv2d", cpu_us=20, flops=1000),
        event("aten::cudnn_convolution", cpu_us=30, device_us=400),
        event("aten::addmm", cpu_us=10, device_us=200, flops=500),
        event("aten::scaled_dot_product_attention", cpu_us=5, shapes=[q, q, q, []]),
        event("aten::_scaled_dot_product_flash_attention", cpu_us=15, device_us=100),
        event("sm90_xmma_fprop_kernel", DeviceType.CUDA, device_us=400),
        event("ampere_sgemm_128x64", DeviceType.CUDA, device_us=200),
        event("flash_fwd_kernel", DeviceType.CUDA, device_us=100),
        event("unattributed_kernel", DeviceType.CUDA, device_us=50),
        SimpleNamespace(**{**vars(event("annotation", cpu_us=999)), "is_user_annotation": True}),
    ]
    ops, busy = op_stats(events)
    assert busy == pytest.approx(750e-6) and "annotation" not in {op.name for op in ops}
    seconds = split_by_kind(ops, wall_s=1e-3, on_device=True, busy_s=busy)
    assert seconds["convolution"] == pytest.approx(400e-6) and seconds["matmul"] == pytest.approx(200e-6)
    assert seconds["attention"] == pytest.approx(100e-6) and seconds["other"] == pytest.approx(50e-6)
    assert seconds["overhead"] == pytest.approx(250e-6)  # the GPU sat idle for a quarter of the step
    assert sum(seconds.values()) == pytest.approx(1e-3)
    attention_flops = sum(op.flops for op in ops if op.kind == "attention")
    assert attention_flops == 4 * 2 * 8 * 64 * 64 * 40  # torch.utils.flop_counter.sdpa_flop_count

    result = step_profile.ProfileResult(
        "sd15", "fp16", ("fp16",), "cuda:0", "fp16", 512, 512, 1, 20, 1e-3, 0.9e-3, seconds, ops,
        sum(op.flops for op in ops), 1e15, "best of 3",
    )  # fmt: skip
    data = result.as_json()
    assert data["time_basis"] == "device (kernel) self time"
    top = data["top_ops"][0]
    assert (top["name"], top["self_cuda_s"], top["share"]) == ("aten::cudnn_convolution", 4e-4, 0.4)
    row = profile_text.op_rows(data)[0]
    assert row == {
        "Operator": "aten::cudnn_convolution",
        "Kind": "convolution",
        "Calls": "1",
        "Self CPU": "30 µs",
        "Self CUDA": "400 µs",
        "Share": "40%",
    }
    assert "of the profiled step (device (kernel) self time)" in profile_text.summary(data)


def test_on_cuda_the_clock_is_read_after_synchronising(monkeypatch):
    calls = []
    monkeypatch.setattr(bench, "synchronize", lambda device: calls.append(("sync", device)))
    profiler = SimpleNamespace(start=lambda: calls.append("start"), stop=lambda: calls.append("stop"))
    prepared = SimpleNamespace(ctx=SimpleNamespace(device="cuda:0"), call_opts=[])
    window = step_profile.StepWindow(prepared, profiler)
    pipe = SimpleNamespace(_interrupt=False)
    for i in range(3):
        window(pipe, i, None, {})
    sync = ("sync", "cuda:0")
    assert calls == [sync, "start", sync, "stop", sync]
    assert pipe._interrupt and window.wall_s is not None and window.plain_s is not None
    assert [a.name for a in step_profile.activities("cuda:0")] == ["CPU", "CUDA"]
    assert [a.name for a in step_profile.activities("cpu")] == ["CPU"]


def test_the_cuda_peak_synchronises_around_each_timed_matmul(monkeypatch):
    calls = []
    real = torch.randn
    monkeypatch.setattr(step_profile, "_peaks", {})
    monkeypatch.setattr(torch, "randn", lambda *size, device=None: real(*size))  # no GPU here: CPU tensors
    monkeypatch.setattr(bench, "synchronize", lambda device: calls.append(device))
    peak = step_profile.matmul_peak("cuda:0", torch.float32, size=64, rounds=2)
    assert peak > 0 and calls == ["cuda:0"] * 4
    assert list(step_profile._peaks) == [("cuda:0", torch.float32, None, 64)]  # not per CPU thread count
