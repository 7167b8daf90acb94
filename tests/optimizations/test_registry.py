"""The optimization registry: names, requirements, conflicts, availability reasons (a missing optional
package makes a technique unavailable with a sentence saying so, and the others still run), and each
technique's facts, which the auto-tuner, Compare, the ladder and the memory estimate read."""

import numpy as np
import pytest

from studio import devices
from studio.errors import ConflictError, UnavailableError, ValidationError
from studio.optimizations import (
    REGISTRY,
    base,
    check_conflicts,
    conflicts_of,
    get,
    ordered,
    unavailable_reason,
)
from tests.tiny import MODULES, run
from tests.tiny import technique_request as request

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


def _missing(monkeypatch, *modules):
    real = base._module_available
    monkeypatch.setattr(base, "_module_available", lambda name: name not in modules and real(name))


def test_missing_packages_make_techniques_unavailable_with_a_reason(monkeypatch, manager, baseline):
    _missing(monkeypatch, "tomesd", "torchao")
    from studio import devices

    hw = devices.detect()
    for name, module in MODULES.items():
        sentence = f"{name} needs the {module} package, which is not installed."
        assert unavailable_reason(REGISTRY[name], hw, "cpu") == sentence
        with pytest.raises(UnavailableError, match=sentence.replace(".", r"\.")):
            request([name])
    for name in ("deepcache", "fused_qkv", "threads", "torch_compile", "sdpa"):
        assert unavailable_reason(REGISTRY[name], hw, "cpu") is None, name
    images, prepared = run(manager, request(["fused_qkv", "deepcache", "threads"]))
    assert {"fused_qkv", "deepcache", "threads"} <= set(prepared.applied) and np.isfinite(images).all()
    assert np.array_equal(run(manager, request())[0], baseline)


def test_missing_xformers_is_named_once_cuda_is_there(monkeypatch, fake_gpus):
    _missing(monkeypatch, "xformers")
    hw = fake_gpus(1, major=8)
    sentence = "xformers needs the xformers package, which is not installed."
    assert unavailable_reason(REGISTRY["xformers"], hw, "cuda:0") == sentence
    with pytest.raises(UnavailableError, match=sentence.replace(".", r"\.")):
        request(["xformers"], device="cuda:0")
    assert unavailable_reason(REGISTRY["sdpa"], hw, "cuda:0") is None


# ---- each technique's facts: declared with it, and the tables above read from them ------------------------


def test_every_technique_declares_each_of_its_facts():
    """autotune, grid, presets, ladder_rung and memory_effect, each explicitly (even as none), and each
    one a value its readers understand: grid points its settings accept, presets and rungs naming registered
    techniques at places of their own."""
    from studio.optimizations.facts import LadderRung, MemoryEffect, Preset

    presets, rungs = [], []
    for opt in REGISTRY.values():
        assert opt.undeclared == frozenset(), f"{opt.name} does not declare {sorted(opt.undeclared)}"
        assert opt.autotune in ("candidate", "excluded", "slow_to_prepare"), opt.name
        points = opt.search_grid()
        assert points and all(isinstance(p, dict) for p in points), opt.name
        for point in points:
            opt.settings.checked(opt.name, point)  # raises on a setting it does not take
        assert len({repr(sorted(p.items())) for p in points}) == len(points), f"{opt.name}: a point twice"
        assert isinstance(opt.presets, tuple) and isinstance(opt.memory_effect, MemoryEffect), opt.name
        for preset in opt.presets:
            assert isinstance(preset, Preset) and preset.techniques[-1] == opt.name, (opt.name, preset)
            assert set(preset.techniques) <= set(REGISTRY), preset
            check_conflicts(set(preset.techniques))
            presets.append(preset)
        if opt.ladder_rung is not None:
            assert isinstance(opt.ladder_rung, LadderRung), opt.name
            assert {*opt.ladder_rung.fallback, *opt.ladder_rung.remove} <= set(REGISTRY), opt.ladder_rung
            rungs.append(opt.ladder_rung)
    assert len({p.position for p in presets}) == len(presets), "two presets at one place"
    assert len({p.label for p in presets}) == len(presets), "a preset declared twice"
    assert len({r.position for r in rungs}) == len(rungs), "two rungs at one place"


def test_a_technique_without_its_facts_is_refused_when_registered():
    from studio.optimizations.base import Optimization, register

    bare = Optimization(name="bare", label="bare", group="speed", description="Nothing.", autotune="excluded")
    assert bare.undeclared == {"grid", "presets", "ladder_rung", "memory_effect"}
    assert bare.grid == ({},) and bare.presets == () and bare.ladder_rung is None, "taken as neutral"
    with pytest.raises(ValueError, match="'bare' does not declare grid, presets, ladder_rung, memory_effect"):
        register(bare)
    assert "bare" not in REGISTRY


def test_the_tables_above_the_registry_are_what_its_techniques_declare():
    """The auto-tuner's candidates and grids, Compare's presets, the speed ladder and the memory techniques
    the estimate offers are read from the registry, in its order or the declared places."""
    from studio.engine.memory_estimate import MEMORY_TECHNIQUES
    from studio.sweeps.autotune_search_space import GRID, candidates, grid
    from studio.sweeps.ladder import RUNGS
    from studio.ui.presets import PRESETS
    from tests import tiny

    declared = {name: opt.search_grid() for name, opt in REGISTRY.items()}
    assert GRID == {name: points for name, points in declared.items() if points != [{}]}
    request = tiny.request()
    hw = devices.detect()
    runnable = {n for n, o in REGISTRY.items() if unavailable_reason(o, hw, request.device, "sd") is None}
    tried = {n for n in runnable if REGISTRY[n].autotune == "candidate"}
    assert set(candidates(request)) == tried and "classic_attention" not in tried
    slow = {n for n in runnable if REGISTRY[n].autotune == "slow_to_prepare"}
    assert set(candidates(request, include_compile=True)) == tried | slow
    assert grid("deepcache", request) == declared["deepcache"]

    presets = sorted((p for o in REGISTRY.values() for p in o.presets), key=lambda p: p.position)
    assert PRESETS == tuple(p.label for p in presets) and PRESETS[0] == "bf16"

    ladder = sorted((o for o in REGISTRY.values() if o.ladder_rung), key=lambda o: o.ladder_rung.position)
    assert [(r.label, r.add, r.fallback) for r in RUNGS] == [
        (o.ladder_rung.label, (o.name,), o.ladder_rung.fallback) for o in ladder
    ]
    for rung, opt in zip(RUNGS, ladder, strict=True):
        replaced = conflicts_of(opt.name) if opt.ladder_rung.replaces_conflicts else opt.ladder_rung.remove
        assert set(rung.remove) == set(replaced), rung
    assert RUNGS[0].add == ("classic_attention",) and RUNGS[-1].add == ("openvino",)

    assert MEMORY_TECHNIQUES == tuple(n for n, o in REGISTRY.items() if o.memory_effect.remedy)


def test_every_declared_conflict_says_why_and_the_refusal_carries_it():
    """A user told two techniques cannot be combined is told why, in the registry's words, naming which."""
    from studio.errors import ConflictError
    from studio.optimizations import REGISTRY, check_conflicts, conflict_reason_of

    silent = [(n, c) for n, o in REGISTRY.items() for c in o.conflicts if not conflict_reason_of(n, c)]
    assert silent == [], "each conflict needs a conflict_reason (or a conflict_reasons entry)"
    with pytest.raises(ConflictError) as refused:
        check_conflicts({"bf16", "openvino"})
    said = str(refused.value)
    assert said.startswith("bf16 and openvino cannot be combined: openvino runs the UNet"), said
    assert said.endswith("; remove one of them.")
