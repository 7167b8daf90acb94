"""The newer techniques on the bundled model: threads, fused QKV, DeepCache, token merging, int8
dynamic quantization, regional compilation. Each applies, stays within a measured tolerance of
the baseline, reverts to the bit-identical baseline, has its settings checked and its conflicts
refused; a missing optional package makes a technique unavailable with a sentence saying so."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
import torch

from pipelines import loader
from studio import devices
from studio.errors import ConflictError, UnavailableError, ValidationError
from studio.manager import PipelineManager
from studio.measure import bench
from studio.measure.quality import max_abs_diff, psnr
from studio.optimizations import REGISTRY, Context, base, unavailable_reason
from studio.optimizations.runtime import max_threads, num_threads, physical_cores
from studio.optimizations.static_quantization import int8_path
from tests import tiny
from tests.tiny import run

STEPS = 6

needs_tomesd = pytest.mark.skipif(
    importlib.util.find_spec("tomesd") is None, reason="tomesd is not installed"
)
needs_torchao = pytest.mark.skipif(
    importlib.util.find_spec("torchao") is None, reason="torchao is not installed"
)


@pytest.fixture(scope="module")
def manager():
    return PipelineManager(load=loader.load)


def request(opts=(), settings=None, steps=STEPS, **kw):
    return tiny.request(opts, settings, steps=steps, **kw)


@pytest.fixture(scope="module")
def baseline(manager):
    return run(manager, request())[0]


MODULES = {"token_merging": "tomesd", "int8_dynamic": "torchao"}
# int8_static path (studio.optimizations.static_quantization.int8_path) -> (largest max-abs difference,
# smallest PSNR) against fp32 at 20 steps, seed 3, UNet + decoder, 4 calibration steps. amx and vnni compute
# the same integers (exact int32 accumulation): measured on AMX (Xeon, model 167) 0.369 / 29.4 dB compiled,
# 0.378 / 29.3 dB with the converted graph run uncompiled. reduced_range (activations 0..127, CPUs without
# VNNI or AMX) measured here, forced: 0.738 / 26.6 dB uncompiled, 0.560 / 26.6 dB compiled. Full-range
# activations on an AVX2-only EPYC gave 21.1 dB (saturating int16 pairs): the reduced_range bound must stay
# above that.
INT8_STATIC_BOUNDS = {"amx": (0.5, 25.0), "vnni": (0.5, 25.0), "reduced_range": (0.9, 23.0)}
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


@pytest.fixture(scope="module")
def baseline20(manager):
    return run(manager, request(steps=20))[0]


def test_fused_qkv_switches_processors_and_removes_the_fused_layers(manager):
    from diffusers.models.attention_processor import AttnProcessor2_0, FusedAttnProcessor2_0

    with manager.acquire(request(["fused_qkv", "sdpa"])) as p:
        unet = p.pipe.unet
        assert {type(x) for x in unet.attn_processors.values()} == {FusedAttnProcessor2_0}
        assert hasattr(unet.down_blocks[0].attentions[0].transformer_blocks[0].attn1, "to_qkv")
        assert hasattr(unet.down_blocks[0].attentions[0].transformer_blocks[0].attn2, "to_kv")
    with manager.acquire(request(["sdpa"])) as p:  # fused_qkv removed, sdpa stays
        assert {type(x) for x in p.pipe.unet.attn_processors.values()} == {AttnProcessor2_0}
        names = {n.rsplit(".", 1)[-1] for n, _ in p.pipe.unet.named_modules()} | {
            n.rsplit(".", 1)[-1] for n, _ in p.pipe.vae.named_modules()
        }
        assert not names & {"to_qkv", "to_kv"}
        assert not any(getattr(m, "fused_projections", False) for m in p.pipe.unet.modules())


def _count_calls(modules):
    counts = dict.fromkeys(modules, 0)
    handles = [
        m.register_forward_pre_hook(lambda mod, args: counts.__setitem__(mod, counts[mod] + 1))
        for m in modules
    ]
    return counts, handles


def test_deepcache_skips_the_deep_blocks_between_full_steps(manager):
    with manager.acquire(request()) as p:
        unet = p.pipe.unet
    shallow, deep_down = unet.down_blocks[0].resnets[0], unet.down_blocks[1].resnets[0]
    mid, deep_up, last_up = (
        unet.mid_block.resnets[0],
        unet.up_blocks[0].resnets[0],
        unet.up_blocks[-1].resnets[-1],
    )
    counts, handles = _count_calls([shallow, deep_down, mid, deep_up, last_up])
    try:
        run(manager, request(["deepcache"]))  # 6 UNet calls, interval 3: full at calls 0 and 3
        assert counts == {shallow: 6, deep_down: 2, mid: 2, deep_up: 2, last_up: 6}
        with manager.acquire(request(["deepcache"])) as p:
            assert p.entry.stats["deepcache_full_calls"] == 2 and p.entry.stats["deepcache_reused_calls"] == 4
        for m in counts:
            counts[m] = 0
        run(manager, request())
        assert set(counts.values()) == {6}, "after revert every block runs at every step again"
    finally:
        for h in handles:
            h.remove()
    assert not any("forward" in vars(m) for m in unet.modules()), "a wrapped forward was left behind"


def test_deepcache_costs_much_more_quality_at_few_steps(manager, baseline, baseline20):
    """DeepCache is for long schedules: at 6 steps adjacent steps differ too much to share features
    (measured on the bundled model: 21.5 dB at 6 steps against 33.6 dB at 20 steps)."""
    few = psnr(run(manager, request(["deepcache"]))[0], baseline)
    many = psnr(run(manager, request(["deepcache"], steps=20))[0], baseline20)
    assert few < many - 6, f"deepcache: {few:.1f} dB at 6 steps vs {many:.1f} dB at 20"


def test_deepcache_branch_deeper_than_the_unet_is_refused_with_a_sentence(manager, baseline):
    req = request(["deepcache"], settings={"deepcache": {"branch": 1}})  # the bundled UNet has 2 down blocks
    with pytest.raises(
        ValidationError, match="deepcache branch 1 leaves no deep down block to cache .* 2 down blocks"
    ):
        run(manager, req)
    assert np.array_equal(run(manager, request())[0], baseline)


@needs_tomesd
def test_token_merging_patches_blocks_and_removes_every_trace(manager):
    with manager.acquire(request()) as p:
        unet = p.pipe.unet
    attributes = {name: set(vars(m)) for name, m in unet.named_modules()}
    with manager.acquire(request(["token_merging"], settings={"token_merging": {"ratio": 0.3}})):
        kinds = {type(m).__name__ for m in unet.modules()}
        assert "ToMeBlock" in kinds and "BasicTransformerBlock" not in kinds
        assert unet._tome_info["args"]["ratio"] == 0.3
    run(manager, request())
    assert "ToMeBlock" not in {type(m).__name__ for m in unet.modules()}
    assert {name: set(vars(m)) for name, m in unet.named_modules()} == attributes, (
        "tomesd left attributes behind"
    )
    assert not unet._forward_pre_hooks


@needs_tomesd
def test_token_merging_ratio_zero_is_the_baseline(manager, baseline):
    """tomesd's block forward is a copy of an older diffusers one: with nothing merged it must match
    0.42.1's."""
    images, _ = run(manager, request(["token_merging"], settings={"token_merging": {"ratio": 0}}))
    assert np.array_equal(images, baseline)


@needs_torchao
def test_int8_dynamic_quantizes_linears_and_puts_the_same_weights_back(manager):
    with manager.acquire(request()) as p:
        unet = p.pipe.unet
    linears = [m for m in unet.modules() if isinstance(m, torch.nn.Linear)]
    before = [m.weight for m in linears]
    with manager.acquire(request(["int8_dynamic"])):
        assert all(type(m.weight.data).__name__ == "Int8Tensor" for m in linears)
        assert unet.conv_in.weight.dtype == torch.float32, "convolutions stay in floating point"
    run(manager, request())
    assert all(m.weight is w for m, w in zip(linears, before, strict=True))
    assert not any("extra_repr" in vars(m) for m in linears)


@needs_torchao
def test_fused_qkv_added_to_a_quantized_unet_is_fused_from_float_weights(manager, baseline):
    int8, _ = run(manager, request(["int8_dynamic"]))
    both, prepared = run(manager, request(["int8_dynamic", "fused_qkv"]))  # fused_qkv applied after int8
    attn = prepared.pipe.unet.down_blocks[0].attentions[0].transformer_blocks[0].attn1
    assert type(attn.to_qkv.weight.data).__name__ == "Int8Tensor"
    assert max_abs_diff(both, int8) <= 1e-3
    run(manager, request(["int8_dynamic"]))  # fused_qkv removed while int8 stays
    assert "to_qkv" not in attn._modules
    assert np.array_equal(run(manager, request())[0], baseline)


@needs_torchao
@pytest.mark.slow
def test_int8_static_calibrates_and_compiles_once_per_shape_then_reverts(manager, baseline20):
    """PT2E static int8 on the bundled UNet: one calibrated, compiled build per input shape; close to fp32;
    reproducible; the float UNet comes back on revert."""
    req = request(["int8_static"], settings={"int8_static": {"calibration_steps": 4}}, steps=20)
    with manager.acquire(request()) as prepared:
        unet, decoder = prepared.pipe.unet, prepared.pipe.vae.decoder
    with manager.acquire(req) as prepared:
        images = bench.run_once(prepared, req).images
        assert type(prepared.pipe.unet).__name__ == "Int8StaticUNet"
        assert type(prepared.pipe.vae.decoder).__name__ == "Int8StaticDecoder"
        assert prepared.entry.stats["compile_count"] == 2, (
            "the UNet at batch 2 and the decoder: one build each"
        )
        assert np.array_equal(bench.run_once(prepared, req).images, images), (
            "the same graphs again, same image"
        )
        assert prepared.entry.stats["compile_count"] == 2
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
    model = devices.detect().cpu_model
    monkeypatch.setattr(devices, "_cpu_info", lambda: (model, frozenset(flags)))
    devices.detect.cache_clear()


def _activation_ranges(graph) -> set[tuple[int, int]]:
    """(quant_min, quant_max) of every per-tensor (activation) quantize node of a converted PT2E graph."""
    graph = getattr(graph, "__wrapped__", graph)  # the cache-recovering wrapper
    graph = getattr(graph, "_orig_mod", graph)  # torch.compile's module
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
        reduce = [prepared.pipe.unet._reduce_range, prepared.pipe.vae.decoder._reduce_range]
        assert reduce == [path == "reduced_range"] * 2
    with manager.acquire(request()) as prepared:
        assert "int8_static_path" not in prepared.entry.stats, "a reverted int8_static leaves no path behind"


@needs_torchao
@pytest.mark.slow
def test_int8_static_reduced_range_forced_here_stays_within_its_bound(monkeypatch, baseline20):
    """The path a CPU without VNNI/AMX takes, forced on this one: every activation quantized to 0..127, and
    the image within the reduced_range bound. Inductor's lowering is the same as on the other paths (the test
    above compiles it); here the converted graph runs uncompiled, which computes the same integers without the
    minutes of C++ compilation."""
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
    with pytest.raises(ConflictError, match="cannot be combined"):
        request(["int8_static", "torch_compile"])
    hw = fake_gpus(1, major=8)
    reason = unavailable_reason(REGISTRY["int8_static"], hw, "cuda:0")
    assert reason == "int8_static runs on the CPU (oneDNN int8 kernels); this run is on cuda:0."


def test_all_new_pipeline_techniques_together_revert_exactly(manager, baseline):
    names = ["deepcache", "fused_qkv", "sdpa", "channels_last"]
    names += [n for n, mod in MODULES.items() if importlib.util.find_spec(mod) is not None]
    images, prepared = run(manager, request(names))
    assert set(names) <= set(prepared.applied)
    assert (
        np.isfinite(images).all() and psnr(images, baseline) > 10
    )  # measured 13.3 dB at 6 steps, mostly deepcache
    assert np.array_equal(run(manager, request())[0], baseline)


def test_threads_are_set_for_the_call_and_restored():
    before = torch.get_num_threads()
    ctx = Context(device="cpu", hw=None, technique_settings={"threads": {"num_threads": 1}})
    with num_threads(ctx):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    with num_threads(Context(device="cpu", hw=None)):
        assert torch.get_num_threads() == physical_cores()
    assert torch.get_num_threads() == before


def test_threads_default_runs_and_leaves_the_setting_alone(manager, baseline):
    before = torch.get_num_threads()
    seen = []
    req = request(["threads"])
    with manager.acquire(req) as prepared:
        images = bench.run_once(
            prepared, req, on_step=lambda i, n: seen.append(torch.get_num_threads())
        ).images
    assert seen and set(seen) == {physical_cores()}
    assert torch.get_num_threads() == before
    assert np.array_equal(images, baseline), "the thread count must not change the image"


def test_threads_setting_reaches_the_call(manager):
    seen = []
    req = request(["threads"], settings={"threads": {"num_threads": 1}})
    with manager.acquire(req) as prepared:
        bench.run_once(prepared, req, on_step=lambda i, n: seen.append(torch.get_num_threads()))
    assert set(seen) == {1}


@pytest.mark.parametrize(
    "settings, message",
    [
        (
            {"threads": {"num_threads": 0}},
            f"threads num_threads must be a whole number between 1 and {max_threads()}",
        ),
        ({"threads": {"num_threads": max_threads() + 1}}, "threads num_threads must be a whole number"),
        ({"threads": {"num_threads": "many"}}, "threads num_threads must be a whole number"),
        ({"deepcache": {"interval": 0}}, "deepcache interval must be a whole number between 1 and 10"),
        ({"deepcache": {"interval": 2.5}}, "deepcache interval must be a whole number"),
        ({"deepcache": {"branch": -1}}, "deepcache branch must be a whole number between 0 and 3"),
        (
            {"deepcache": {"depth": 1}},
            "deepcache settings must be a mapping with keys from: interval, branch",
        ),
        (
            {"token_merging": {"ratio": 0.8}},
            "token_merging ratio must be a finite number between 0.0 and 0.75",
        ),
        ({"token_merging": {"ratio": "half"}}, "token_merging ratio must be a number"),
        ({"token_merging": {"max_downsample": 3}}, "token_merging max_downsample must be one of 1, 2, 4, 8"),
        ({"torch_compile": {"regional": "maybe"}}, "torch_compile regional must be true or false"),
        (
            {"torch_compile": {"mode": "ludicrous"}},
            "torch_compile mode must be one of default, reduce-overhead",
        ),
        (
            {"torch_compile": {"dynamic": "sometimes"}},
            "torch_compile dynamic must be one of auto, true, false",
        ),
        ({"torch_compile": {"freezing": "yes please"}}, "torch_compile freezing must be true or false"),
        ({"torch_compile": {"cpp_wrapper": 2}}, "torch_compile cpp_wrapper must be true or false"),
        ({"int8_dynamic": {"bits": 4}}, "int8_dynamic settings must be a mapping with keys from: none"),
        ({"fused_qkv": {"x": 1}}, "fused_qkv settings must be a mapping with keys from: none"),
    ],
)
def test_bad_settings_are_refused_with_a_sentence(settings, message):
    opts = [n for n in settings if importlib.util.find_spec(MODULES.get(n, "torch")) is not None]
    with pytest.raises(ValidationError, match=message):
        request(opts, settings=settings)


def test_good_settings_are_normalised():
    r = request(["torch_compile"], settings={"torch_compile": {"mode": "max-autotune", "regional": "true"}})
    assert r.settings["torch_compile"] == {"mode": "max-autotune", "regional": True}
    r = request(
        ["torch_compile"],
        settings={"torch_compile": {"dynamic": "False", "freezing": "yes", "cpp_wrapper": "0"}},
    )
    assert r.settings["torch_compile"] == {"dynamic": "false", "freezing": True, "cpp_wrapper": False}
    r = request(
        ["threads", "deepcache"], settings={"threads": {"num_threads": "1"}, "deepcache": {"interval": "2"}}
    )
    assert r.settings == {"threads": {"num_threads": 1}, "deepcache": {"interval": 2}}
    r = request([], settings={"token_merging": {"ratio": "0.25", "max_downsample": "2"}})
    assert r.settings == {}, "settings of techniques not requested are checked, then dropped"


@pytest.mark.parametrize(
    "pair",
    [
        ("fused_qkv", "classic_attention"),
        ("fused_qkv", "attention_slicing"),
        ("fused_qkv", "xformers"),
        ("deepcache", "jit_trace_unet"),
        ("token_merging", "jit_trace_unet"),
        ("int8_dynamic", "jit_trace_unet"),
    ],
)
def test_conflicts_are_refused(pair):
    with pytest.raises(
        ConflictError, match=f"{pair[0]} and {pair[1]} cannot be combined|{pair[1]} and {pair[0]} cannot"
    ):
        request(list(pair))


def test_fused_qkv_combines_with_sdpa():
    assert request(["fused_qkv", "sdpa"]).opts == ("sdpa", "fused_qkv")


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


def test_new_entries_declare_defaults_for_every_setting():
    assert REGISTRY["threads"].defaults == {"num_threads": physical_cores()}
    assert REGISTRY["deepcache"].defaults == {"interval": 3, "branch": 0}
    assert REGISTRY["token_merging"].defaults == {"ratio": 0.5, "max_downsample": 1}
    assert REGISTRY["torch_compile"].defaults == {
        "mode": "default",
        "regional": False,
        "dynamic": "auto",
        "freezing": False,
        "cpp_wrapper": False,
    }
    assert REGISTRY["threads"].stage == "call" and REGISTRY["int8_dynamic"].reversible


@pytest.mark.slow
def test_regional_compile_matches_and_reverts(manager, baseline):
    req = request(["torch_compile"], settings={"torch_compile": {"regional": True}})
    with manager.acquire(req) as prepared:
        bench.run_once(prepared, req)
        builds = prepared.entry.stats["compile_count"]
        images = bench.run_once(prepared, req).images
        assert prepared.entry.stats["compile_count"] == builds, "the same shape again compiles nothing"
        bench.run_once(
            prepared,
            request(
                ["torch_compile"],
                settings={"torch_compile": {"regional": True}},
                steps=2,
                width=72,
                height=72,
            ),
        )
        assert prepared.entry.stats["compile_count"] > builds, "a new shape is a recompile, and is counted"
        unet = prepared.pipe.unet
        compiled = [m for m in unet.modules() if "_compiled_call_impl" in vars(m)]
        assert compiled and {type(m).__name__ for m in compiled} == {"BasicTransformerBlock"}
        assert type(unet).__name__ == "UNet2DConditionModel", "regional compilation keeps the UNet itself"
    assert max_abs_diff(images, baseline) <= 1e-3
    assert np.array_equal(run(manager, request())[0], baseline)
    assert not any("_compiled_call_impl" in vars(m) for m in unet.modules())


STATIC_SETTINGS = {"cfg_cutoff": {"after": 0.4}, "torch_compile": {"dynamic": "false"}}


def _eager_graphs(monkeypatch) -> None:
    """Inductor replaced by running the graph dynamo hands it as is: dynamo still traces, guards and counts
    every graph; the test costs traces, not C++ compiles."""
    import torch._inductor.compile_fx as compile_fx

    monkeypatch.setattr(compile_fx, "compile_fx", lambda graph, example_inputs, **kwargs: graph.forward)


@pytest.mark.slow
def test_static_compile_with_caching_builds_each_path_once_and_draws_what_eager_draws(manager):
    """dynamic=false with DeepCache: inductor builds one static graph per cache path (full, cached) on the
    first run and reuses them after. (The guidance cut-off's batch-1 graphs, the same lowering at another
    batch size, are counted in the next test.)"""
    settings = {"torch_compile": {"dynamic": "false"}}
    eager = run(manager, request(["deepcache"], steps=STEPS))[0]
    req = request(["deepcache", "torch_compile"], settings=settings, steps=STEPS)
    with PipelineManager(load=loader.load).acquire(req) as prepared:
        images = bench.run_once(prepared, req).images
        assert prepared.entry.stats["compile_count"] == 2, "the full and the cached path"
        bench.run_once(prepared, req)
        assert prepared.entry.stats["compile_count"] == 2, "the same request again builds nothing"
    assert max_abs_diff(images, eager) <= 1e-3, "compiled draws what eager draws"


@pytest.mark.slow
def test_every_live_pipeline_of_a_class_gets_its_own_static_graphs(manager, monkeypatch):
    """Dynamo keeps graphs per code object, shared by every UNet of a class: past its limit of 8 it would run
    the third of these pipelines (12 graphs) eagerly without saying so. Each builds its four graphs once, and
    uses them."""
    _eager_graphs(monkeypatch)
    eager = run(manager, request(["deepcache", "cfg_cutoff"], settings=STATIC_SETTINGS, steps=STEPS))[0]
    req = request(["deepcache", "cfg_cutoff", "torch_compile"], settings=STATIC_SETTINGS, steps=STEPS)
    engines = [PipelineManager(load=loader.load) for _ in range(3)]  # all alive, each holding its graphs
    for number, engine in enumerate(engines, 1):
        with engine.acquire(req) as prepared:
            images = bench.run_once(prepared, req).images
            built = prepared.entry.stats.get("compile_count")
            assert built == 4, f"pipeline {number}: full and cached path, at batch 2 then 1"
            bench.run_once(prepared, req)
            assert prepared.entry.stats["compile_count"] == 4, f"pipeline {number}: the same request again"
        assert max_abs_diff(images, eager) <= 1e-3, f"pipeline {number}: its graphs draw what eager draws"


@pytest.mark.parametrize("settings", [{}, {"freezing": True, "cpp_wrapper": True}])
def test_compile_inference_settings_reach_inductor_while_dynamo_traces(monkeypatch, settings):
    """freezing and cpp_wrapper are in force when inductor is handed each graph -- freezing already while
    dynamo traces, since weights become constants of the graph only then -- and nowhere else afterwards.
    Inductor is replaced by running the graph it is handed eagerly: the test costs a trace, not a compile."""
    import torch._inductor.compile_fx as compile_fx

    seen = []

    def inductor(graph, example_inputs, config_patches=None, **kwargs):
        seen.append({"freezing while traced": torch._inductor.config.freezing, **(config_patches or {})})
        return graph.forward

    monkeypatch.setattr(compile_fx, "compile_fx", inductor)
    req = request(["torch_compile"], settings={"torch_compile": {"dynamic": "false", **settings}})
    with PipelineManager(load=loader.load).acquire(req) as prepared:
        bench.run_once(prepared, req)
    assert len(seen) == prepared.entry.stats["compile_count"] >= 1
    for graph in seen:
        assert graph["freezing while traced"] is settings.get("freezing", False)
        assert graph.get("cpp_wrapper", False) is settings.get("cpp_wrapper", False)
    assert torch._inductor.config.freezing is False and torch._inductor.config.cpp_wrapper is False, "no leak"


def test_cfg_cutoff_runs_the_late_steps_on_one_sample_then_leaves_no_trace(manager, baseline):
    with manager.acquire(request()) as p:
        unet = p.pipe.unet
    batches = []
    handle = unet.register_forward_pre_hook(lambda mod, args: batches.append(args[0].shape[0]))
    try:
        images, prepared = run(
            manager, request(["cfg_cutoff"], settings={"cfg_cutoff": {"after": 0.5}}, steps=6)
        )
    finally:
        handle.remove()
    assert batches == [2, 2, 2, 1, 1, 1], "guided (2 samples) for half the steps, then one sample"
    assert prepared.entry.stats["unguided_steps"] == 3
    assert not np.array_equal(images, baseline)
    assert np.array_equal(run(manager, request())[0], baseline), (
        "the next run without it is guided throughout"
    )


@pytest.mark.parametrize("after", [0, -0.5, 1.5, "half", float("nan")])
def test_cfg_cutoff_fraction_out_of_range_is_refused_with_a_sentence(after):
    with pytest.raises(
        ValidationError, match=r"cfg_cutoff after must be a (finite )?number between 0.05 and 1.0"
    ):
        request(["cfg_cutoff"], settings={"cfg_cutoff": {"after": after}})
