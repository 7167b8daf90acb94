"""Static int8 (studio.optimizations.static_quantization, PT2E with torchao): the CPU's flags choose the path
(amx, vnni or reduced_range), which is recorded; the UNet and the decoder are calibrated and compiled once per
input shape, draw within the path's measured bound of fp32 and revert to the very same float modules; settings
it cannot take, and devices it cannot run on, are refused before any compute."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from pipelines import loader
from studio import devices
from studio.devices import int8_path
from studio.errors import ConflictError, ValidationError
from studio.manager import PipelineManager
from studio.measure import bench
from studio.measure.quality import max_abs_diff, psnr
from studio.optimizations import REGISTRY, unavailable_reason
from tests import tiny
from tests.tiny import needs_torchao, run
from tests.tiny import technique_request as request

# int8_static path (studio.devices.int8_path) -> (largest max-abs difference,
# smallest PSNR) against fp32 at 20 steps, seed 3, UNet + decoder, 4 calibration steps. amx and vnni compute
# the same integers (exact int32 accumulation): measured on AMX (Xeon, model 167) 0.369 / 29.4 dB compiled,
# 0.378 / 29.3 dB with the converted graph run uncompiled. reduced_range (activations 0..127, CPUs without
# VNNI or AMX) measured here, forced: 0.738 / 26.6 dB uncompiled, 0.560 / 26.6 dB compiled. Full-range
# activations on an AVX2-only EPYC gave 21.1 dB (saturating int16 pairs): the reduced_range bound must stay
# above that. vnni on an AMD EPYC (family 25 model 17) measured 0.535 / 28.5 dB in the full suite, and amx on
# the Xeon (model 167) 0.546 / 26.8 dB with the retrained weights: the same integers, so the same bound.
INT8_STATIC_BOUNDS = {"amx": (0.65, 25.0), "vnni": (0.65, 25.0), "reduced_range": (0.9, 23.0)}


# /proc/cpuinfo flags (the int8-relevant part) of the CPUs CI runs on, and the path each must take.
CPU_FLAGS = {
    "amd-epyc-avx2": ({"sse4_2", "avx", "avx2", "fma", "f16c", "bmi2", "sha_ni"}, "reduced_range"),
    "cascade-lake": ({"avx2", "avx512f", "avx512bw", "avx512vl", "avx512_vnni"}, "vnni"),
    "sapphire-rapids": (
        {"avx2", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_bf16", "amx_tile", "amx_int8"},
        "amx",
    ),
    "alder-lake": ({"avx2", "fma", "avx_vnni"}, "vnni"),
}


@needs_torchao
@pytest.mark.slow
def test_int8_static_calibrates_and_compiles_once_per_shape_then_reverts(manager, baseline20):
    """PT2E static int8 on the bundled UNet: one calibrated, compiled build per input shape; close to fp32;
    reproducible; the float UNet comes back on revert."""
    req = request(["int8_static"], settings={"int8_static": {"calibration_steps": 4}}, steps=20)
    with manager.acquire(request()) as prepared:
        unet, decoder = prepared.pipe.unet, prepared.pipe.vae.decoder
    with manager.acquire(req) as prepared, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        images = bench.run_once(prepared, req).images
        lowering = [str(w.message) for w in caught if w.filename.endswith("mkldnn_lowerings.py")]
        assert not lowering, f"inductor's lowering warnings reached the user: {lowering[:1]}"
        assert type(prepared.pipe.unet).__name__ == "Int8StaticUNet"
        assert type(prepared.pipe.vae.decoder).__name__ == "Int8StaticDecoder"
        assert prepared.entry.stats["compile_count"] == 2, (
            "the UNet at batch 2 and the decoder: one build each"
        )
        assert np.array_equal(bench.run_once(prepared, req).images, images), (
            "the same graphs again, same image"
        )
        assert prepared.entry.stats["compile_count"] == 2
        paid = [(e["technique"], e["phase"]) for e in prepared.entry.stats["phases"]]
        assert paid == [("int8_static", "cold")] * 2, "each build says it calibrated now"
        path = prepared.entry.stats["int8_static_path"]
        assert path == int8_path(devices.detect().cpu_flags), "the path this CPU takes is recorded"
        graphs = [*prepared.pipe.unet._graphs.values(), *prepared.pipe.vae.decoder._graphs.values()]
        top = 127 if path == "reduced_range" else 255
        assert {r for g in graphs for r in _activation_ranges(g)} == {(0, top)}
    diff, db = max_abs_diff(images, baseline20), psnr(images, baseline20)
    most, least = INT8_STATIC_BOUNDS[path]
    assert 0 < diff <= most and db >= least, f"{path}: {diff:.4f} ({db:.1f} dB)"
    assert tiny.fidelity(images)["detected"] == tiny.fidelity(baseline20)["detected"]
    assert np.array_equal(run(manager, request(steps=20))[0], baseline20), (
        "reverting int8_static restores fp32"
    )
    with manager.acquire(request()) as prepared:
        assert prepared.pipe.unet is unet and prepared.pipe.vae.decoder is decoder, (
            "the very same float modules"
        )


@pytest.mark.parametrize("cpu", sorted(CPU_FLAGS))
def test_int8_path_follows_the_cpu_flags(cpu):
    flags, path = CPU_FLAGS[cpu]
    assert int8_path(frozenset(flags)) == path


def _fake_cpu(monkeypatch, flags):
    model, signature = devices.detect().cpu_model, devices.detect().cpu_signature
    monkeypatch.setattr(devices, "_cpu_info", lambda: (model, frozenset(flags), signature))
    devices.detect.cache_clear()


def _converted(graph):
    """The converted PT2E graph module inside a build."""
    graph = getattr(graph, "__wrapped__", graph)  # the cache-recovering wrapper
    return getattr(graph, "_orig_mod", graph)  # torch.compile's module


def _activation_ranges(graph) -> set[tuple[int, int]]:
    """(quant_min, quant_max) of every per-tensor (activation) quantize node of a converted PT2E graph."""
    graph = _converted(graph)
    quantize = torch.ops.quantized_decomposed.quantize_per_tensor.default
    return {tuple(n.args[3:5]) for n in graph.graph.nodes if n.op == "call_function" and n.target == quantize}


@needs_torchao
@pytest.mark.parametrize("cpu", sorted(CPU_FLAGS))
def test_int8_static_records_its_path_and_quantizes_activations_for_it(manager, monkeypatch, cpu):
    """Applying int8_static (nothing is built before the first call) picks the path from the CPU's flags,
    records it in the pipeline's stats, and hands the reduced activation range to both builds where there is
    no VNNI/AMX."""
    flags, path = CPU_FLAGS[cpu]
    _fake_cpu(monkeypatch, flags)
    req = request(["int8_static"], settings={"int8_static": {"calibration_steps": 3}})
    with manager.acquire(req) as prepared:
        assert prepared.entry.stats["int8_static_path"] == path
        recipes = [prepared.pipe.unet._recipe, prepared.pipe.vae.decoder._recipe]
        assert [r.reduce_range for r in recipes] == [path == "reduced_range"] * 2
        assert [r.cpp_wrapper for r in recipes] == [path != "vnni"] * 2, (
            "auto: the C++ launcher everywhere but the vnni path"
        )
    with manager.acquire(request()) as prepared:
        assert "int8_static_path" not in prepared.entry.stats, "a reverted int8_static leaves no path behind"


@needs_torchao
@pytest.mark.slow
def test_int8_static_reduced_range_forced_here_stays_within_its_bound(monkeypatch, baseline20):
    """The path a CPU without VNNI/AMX takes, forced on this one: every activation quantized to 0..127, and
    the image within the reduced_range bound. Inductor's lowering is the same as on the other paths (the test
    above compiles it); here the converted graph runs uncompiled, which computes the same integers without the
    minutes of C++ compilation. Where the CPU's own path is reduced_range, the test above asserts all of this
    on the compiled graphs (the path recorded, every activation within 0..127, the image within the same
    bound, its shapes found), so there this one is left out."""
    if int8_path(devices.detect().cpu_flags) == "reduced_range":
        pytest.skip("this CPU's own path is reduced_range: the compiled test above asserts the same")
    _fake_cpu(monkeypatch, CPU_FLAGS["amd-epyc-avx2"][0])
    monkeypatch.setattr(torch, "compile", lambda module, **kwargs: module)
    req = request(["int8_static"], settings={"int8_static": {"calibration_steps": 4}}, steps=20)
    with PipelineManager(load=loader.load).acquire(req) as prepared:
        images = bench.run_once(prepared, req).images
        assert prepared.entry.stats["int8_static_path"] == "reduced_range"
        graphs = [*prepared.pipe.unet._graphs.values(), *prepared.pipe.vae.decoder._graphs.values()]
    assert len(graphs) == 2 and all(_activation_ranges(g) == {(0, 127)} for g in graphs)
    diff, db = max_abs_diff(images, baseline20), psnr(images, baseline20)
    most, least = INT8_STATIC_BOUNDS["reduced_range"]
    assert 0 < diff <= most and db >= least, f"reduced_range: {diff:.4f} ({db:.1f} dB)"
    detected = tiny.fidelity(images)["detected"]
    assert detected == tiny.fidelity(baseline20)["detected"]


def _int8_weights(graph) -> dict[str, list[bool]]:
    """For each convolution and linear node of a converted PT2E graph, in order: is its weight int8 (fed by a
    per-channel dequantize)?"""
    graph = _converted(graph)
    dequantize = torch.ops.quantized_decomposed.dequantize_per_channel.default
    found: dict[str, list[bool]] = {"conv": [], "linear": []}
    for node in graph.graph.nodes:
        kind = {torch.ops.aten.conv2d.default: "conv", torch.ops.aten.linear.default: "linear"}.get(
            node.target
        )
        if kind:
            weight = node.args[1]
            found[kind].append(weight.op == "call_function" and weight.target == dequantize)
    return found


@needs_torchao
def test_int8_static_convolutions_only_keeps_linears_and_the_edge_convolutions_in_float(monkeypatch):
    """layers=convolutions (OpenVINO's hybrid recipe): int8 convolutions, except the first and the last, in
    the UNet and the decoder; every linear layer stays in float. The converted graphs run uncompiled (the same
    integers, without minutes of C++ compilation)."""
    monkeypatch.setattr(torch, "compile", lambda module, **kwargs: module)
    settings = {"int8_static": {"calibration_steps": 1, "layers": "convolutions"}}
    req = request(["int8_static"], settings=settings, steps=1)
    with PipelineManager(load=loader.load).acquire(req) as prepared:
        bench.run_once(prepared, req)
        unet, decoder = (
            next(iter(m._graphs.values())) for m in (prepared.pipe.unet, prepared.pipe.vae.decoder)
        )
    for graph in (unet, decoder):
        convs = _int8_weights(graph)["conv"]
        assert convs[0] is False and convs[-1] is False and all(convs[1:-1]), convs
    assert _int8_weights(unet)["linear"] and not any(_int8_weights(unet)["linear"])


@needs_torchao
def test_int8_static_with_vae_off_leaves_the_decoder_in_float():
    """vae=false quantizes the UNet only (nothing is built before the first call, so this costs a load)."""
    req = request(["int8_static"], settings={"int8_static": {"vae": False}})
    with PipelineManager(load=loader.load).acquire(req) as prepared:
        assert type(prepared.pipe.unet).__name__ == "Int8StaticUNet"
        assert type(prepared.pipe.vae.decoder).__name__ == "Decoder"


def test_int8_static_is_refused_before_any_compute_where_it_cannot_run(fake_gpus):
    with pytest.raises(
        ValidationError, match="int8_static calibration_steps must be a whole number between 1 and 50"
    ):
        request(["int8_static"], settings={"int8_static": {"calibration_steps": 0}})
    with pytest.raises(ValidationError, match="int8_static vae must be true or false"):
        request(["int8_static"], settings={"int8_static": {"vae": "sometimes"}})
    with pytest.raises(ValidationError, match="int8_static layers must be one of"):
        request(["int8_static"], settings={"int8_static": {"layers": "linear"}})
    with pytest.raises(ValidationError, match="int8_static bias_correction must be true or false"):
        request(["int8_static"], settings={"int8_static": {"bias_correction": "maybe"}})
    with pytest.raises(ValidationError, match="int8_static cpp_wrapper must be one of auto, true, false"):
        request(["int8_static"], settings={"int8_static": {"cpp_wrapper": "sometimes"}})
    with pytest.raises(ConflictError, match="cannot be combined"):
        request(["int8_static", "torch_compile"])
    hw = fake_gpus(1, major=8)
    reason = unavailable_reason(REGISTRY["int8_static"], hw, "cuda:0")
    assert reason == "int8_static runs on the CPU (oneDNN int8 kernels); this run is on cuda:0."


@needs_torchao
@pytest.mark.parametrize(
    ("setting", "flags", "wrapped"),
    [("true", "cascade-lake", True), ("false", "sapphire-rapids", False), ("FALSE", "amd-epyc-avx2", False)],
)
def test_int8_static_cpp_wrapper_set_by_hand_wins_over_the_cpus_default(
    manager, monkeypatch, setting, flags, wrapped
):
    _fake_cpu(monkeypatch, CPU_FLAGS[flags][0])
    req = request(["int8_static"], settings={"int8_static": {"cpp_wrapper": setting}})
    with manager.acquire(req) as prepared:
        assert prepared.pipe.unet._recipe.cpp_wrapper is wrapped
        assert prepared.pipe.vae.decoder._recipe.cpp_wrapper is wrapped
