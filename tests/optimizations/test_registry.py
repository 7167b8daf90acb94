"""The optimization registry: names, requirements, conflicts, availability reasons."""

import pytest

from studio import devices
from studio.errors import ConflictError, ValidationError
from studio.optimizations import REGISTRY, check_conflicts, conflicts_of, get, ordered, unavailable_reason

SEED_NAMES = {
    "cudnn_benchmark",
    "tf32",
    "autocast",
    "fp16",
    "bf16",
    "channels_last",
    "sdpa",
    "xformers",
    "classic_attention",
    "attention_slicing",
    "vae_slicing",
    "vae_tiling",
    "jit_trace_unet",
    "torch_compile",
    "model_cpu_offload",
    "sequential_cpu_offload",
    "device_map_balanced",
}


def test_every_seed_technique_is_registered_with_its_public_name():
    assert SEED_NAMES <= set(REGISTRY)


def test_every_entry_is_complete():
    for opt in REGISTRY.values():
        assert opt.label and opt.description.endswith(".")
        assert opt.group in ("speed", "memory", "precision")
        assert opt.stage in ("load", "pipeline", "call")
        for other in opt.conflicts:
            assert other in REGISTRY, f"{opt.name} conflicts with unknown {other}"
            assert opt.name in conflicts_of(other), f"conflict {opt.name}/{other} is one-sided"


def test_unknown_name_lists_valid_names():
    with pytest.raises(ValidationError, match="Unknown optimization 'turbo'.*bf16"):
        get("turbo")


@pytest.mark.parametrize(
    "pair",
    [
        ("fp16", "bf16"),
        ("sdpa", "xformers"),
        ("model_cpu_offload", "device_map_balanced"),
        ("jit_trace_unet", "torch_compile"),
        ("classic_attention", "attention_slicing"),
    ],
)
def test_conflicts_are_refused(pair):
    with pytest.raises(ConflictError, match="cannot be combined"):
        check_conflicts(set(pair))


def test_cuda_only_techniques_are_unavailable_on_cpu_with_a_reason(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    hw = devices.detect()
    for name in ("cudnn_benchmark", "tf32", "xformers", "model_cpu_offload", "device_map_balanced", "fp16"):
        reason = unavailable_reason(REGISTRY[name], hw, "cpu")
        assert reason and reason.startswith(name) and reason.endswith("."), (name, reason)
    for name in (
        "bf16",
        "autocast",
        "channels_last",
        "sdpa",
        "classic_attention",
        "attention_slicing",
        "vae_slicing",
        "vae_tiling",
        "jit_trace_unet",
        "torch_compile",
    ):
        assert unavailable_reason(REGISTRY[name], hw, "cpu") is None, name


def test_gpu_techniques_become_available_with_fake_gpus(fake_gpus):
    hw = fake_gpus(2, major=8)
    for name in ("cudnn_benchmark", "tf32", "fp16", "model_cpu_offload", "device_map_balanced"):
        assert unavailable_reason(REGISTRY[name], hw, "cuda:0") is None, name
    old = fake_gpus(1, major=7)
    assert "Ampere" in unavailable_reason(REGISTRY["tf32"], old, "cuda:0")


def test_trace_needs_an_sd_unet():
    hw = devices.detect()
    assert "sdxl" in unavailable_reason(REGISTRY["jit_trace_unet"], hw, "cpu", family="sdxl")


def test_apply_order_puts_layout_before_graph_capture():
    names = [o.name for o in ordered({"jit_trace_unet", "channels_last", "bf16", "sdpa"})]
    assert (
        names.index("bf16")
        < names.index("channels_last")
        < names.index("sdpa")
        < names.index("jit_trace_unet")
    )
