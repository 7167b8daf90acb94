"""Every technique on the transformer pipelines (flux-tiny, sd3-tiny): what runs there draws what the baseline
draws within its stated bound and reverts to exactly the baseline's image; what does not run there is refused
with the reason, in the registry, the request and the CLI."""

from __future__ import annotations

import gc

import numpy as np
import pytest
import torch
from diffusers.models import attention_dispatch as dispatch

from studio import devices, report
from studio.errors import UnavailableError, ValidationError
from studio.manager import PipelineManager
from studio.measure import bench
from studio.measure.quality import max_abs_diff, psnr
from studio.optimizations import REGISTRY, unavailable_reason
from studio.request import build_request
from tests.optimizations.test_compile import eager_graphs
from tests.optimizations.test_equivalence import EXACTISH, Bound

STEPS = 6
CACHED = {"first_block_cache": {"threshold": 0.5}}  # random weights: the first block always changes a lot
# Measured here (AMD EPYC, Zen 4, 6 steps, seed 3, 64x64), PSNR against fp32: flux-tiny first_block_cache
# (threshold 0.5) 52 dB, pyramid_attention_broadcast 69, faster_cache 71, taylorseer_cache 71, autocast 42,
# int8_dynamic 60, int8_weight_only 62, layerwise_casting 49; sd3-tiny cfg_cutoff 31, int8_dynamic 46,
# int8_weight_only 61, layerwise_casting 55, autocast 44; the rest identical or within 1e-5.
BOUNDS: dict[str, dict[str, Bound]] = {
    "flux-tiny": {
        "fused_qkv": EXACTISH,
        "attention_backend": EXACTISH,
        "first_block_cache": Bound(0.08, 40.0, lossy=True),
        "pyramid_attention_broadcast": Bound(0.03, 50.0, lossy=True),
        "faster_cache": Bound(0.03, 50.0, lossy=True),
        "taylorseer_cache": Bound(0.03, 50.0, lossy=True),
        "vae_slicing": EXACTISH,
        "vae_tiling": EXACTISH,
        "autocast": Bound(0.15, 35.0, lossy=True),
        "int8_dynamic": Bound(0.05, 45.0, lossy=True),
        "int8_weight_only": Bound(0.05, 45.0, lossy=True),
        "layerwise_casting": Bound(0.08, 40.0, lossy=True),
        "group_offload": EXACTISH,
        "threads": EXACTISH,
        "aot_package": EXACTISH,  # compiled ahead of time: the same maths
        "fuse_lora": EXACTISH,  # no LoRA: nothing to fold
    },
    "sd3-tiny": {
        "fused_qkv": EXACTISH,
        "cfg_cutoff": Bound(0.5, 25.0, lossy=True),
        "vae_slicing": EXACTISH,
        "vae_tiling": EXACTISH,
        "autocast": Bound(0.15, 35.0, lossy=True),
        "int8_dynamic": Bound(0.1, 38.0, lossy=True),
        "int8_weight_only": Bound(0.05, 45.0, lossy=True),
        "layerwise_casting": Bound(0.08, 40.0, lossy=True),
        "group_offload": EXACTISH,
        "threads": EXACTISH,
        "aot_package": EXACTISH,  # compiled ahead of time: the same maths
        "fuse_lora": EXACTISH,  # no LoRA: nothing to fold
    },
}
ELSEWHERE = {
    "torch_compile": "test_regional_compile_of_the_transformer_blocks_matches_and_reverts",
    # test_step_lever.py: refused on a tiny transformer (no part fits its shapes)
    "few_step": "test_the_step_lever_is_refused_where_no_part_is_registered",
    "tiny_vae": "test_the_step_lever_is_refused_where_no_part_is_registered",
}
SETTINGS = {**CACHED, "attention_backend": {"backend": "_native_math"}}


def _request(model: str, optimizations=(), settings=None, **kw):
    return build_request(
        model=model,
        prompt="a red circle",
        seed=3,
        steps=STEPS,
        optimizations=list(optimizations),
        settings=settings,
        **kw,
    )


@pytest.fixture(scope="module")
def manager():
    return PipelineManager()


def _run(manager, model: str, optimizations=(), settings=None):
    req = _request(model, optimizations, settings)
    with manager.acquire(req) as prepared:
        return bench.run_once(prepared, req).images, prepared


@pytest.fixture(scope="module")
def baselines(manager):
    return {model: _run(manager, model)[0] for model in BOUNDS}


@pytest.mark.parametrize("model", sorted(BOUNDS))
def test_every_technique_that_runs_on_the_model_has_a_row(model):
    family = _request(model).spec.family
    runnable = {
        n
        for n, o in REGISTRY.items()
        if o.stage != "load" and not unavailable_reason(o, devices.detect(), "cpu", family)
    }
    assert runnable == set(BOUNDS[model]) | set(ELSEWHERE)


@pytest.mark.parametrize(("model", "name"), [(m, n) for m in sorted(BOUNDS) for n in sorted(BOUNDS[m])])
def test_within_its_bound_then_reverts_exactly(manager, baselines, model, name):
    bound, baseline = BOUNDS[model][name], baselines[model]
    settings = {name: SETTINGS[name]} if name in SETTINGS else None
    images, prepared = _run(manager, model, (name,), settings)
    assert prepared.applied == (name,)
    diff, db = max_abs_diff(images, baseline), psnr(images, baseline)
    assert diff <= bound.max_abs and db >= bound.min_psnr, f"{name} on {model}: {diff:.2e} ({db:.1f} dB)"
    assert not bound.lossy or diff > 0, f"{name} did not change the image: did it engage?"
    assert np.array_equal(_run(manager, model)[0], baseline), (
        f"reverting {name} did not give back the baseline"
    )


def test_fused_qkv_fuses_the_text_stream_too_and_leaves_nothing(manager):
    for model in BOUNDS:
        _, prepared = _run(manager, model, ("fused_qkv",))
        layers = [m for m in prepared.pipe.transformer.modules() if hasattr(m, "fused_projections")]
        assert layers and all(m.fused_projections for m in layers), model
        joint = [m for m in layers if getattr(m, "add_q_proj", None) is not None]
        assert joint and all(hasattr(m, "to_added_qkv") for m in joint)
        if model == "sd3-tiny":
            assert {type(m.processor).__name__ for m in layers} == {"FusedJointAttnProcessor2_0"}
        _run(manager, model)
        assert not any(m.fused_projections or hasattr(m, "to_qkv") for m in layers)
        assert {type(m.processor).__name__ for m in layers} != {"FusedJointAttnProcessor2_0"}


def _hook_leftovers(model: torch.nn.Module) -> list[tuple[str, str]]:
    """(module, attribute) for the hook registry's attributes on `model` (a Flux pipeline call leaves an empty
    registry on the transformer itself: resetting its caches creates one)."""
    names = ("_diffusers_hook", "forward", "_cache_config")
    return [(n, a) for n, m in model.named_modules() for a in names if a in vars(m)]


def test_step_caches_leave_no_hook_behind(manager):
    _, base = _run(manager, "flux-tiny")
    before = _hook_leftovers(base.pipe.transformer)
    _, prepared = _run(manager, "flux-tiny", ("first_block_cache",), CACHED)
    model = prepared.pipe.transformer
    assert model.is_cache_enabled and len(_hook_leftovers(model)) > len(before)
    _run(manager, "flux-tiny")
    assert not model.is_cache_enabled and _hook_leftovers(model) == before


def test_first_block_cache_counts_the_steps_it_reused_and_the_record_says_what_share(manager):
    shares = {}
    for threshold in (2.0, 0.001):  # loose: the later steps reuse the blocks; tight: every step computes
        settings = {"first_block_cache": {"threshold": threshold}}
        _, prepared = _run(manager, "flux-tiny", ("first_block_cache",), settings)
        reused, calls = prepared.entry.stats["steps_reused"]
        assert calls == STEPS, "one count per denoiser call of the last pipeline call"
        row = {"id": 1, "status": "ok", "config_label": f"fbc{threshold:g}", "latency_s": 0.1}
        shares[threshold] = report.log_record({**row, "stats": {"steps_reused": [reused, calls]}})
    assert 0 < shares[2.0]["steps_reused_pct"] < 100 and shares[0.001]["steps_reused_pct"] == 0.0
    table = report.markdown([shares[2.0], shares[0.001]])
    said = f"fbc2 {shares[2.0]['steps_reused_pct']:g}%; fbc0.001 0%."
    sentence = "Steps reused by the step cache (of the denoiser's calls in the last call): "
    assert table.endswith(sentence + said)
    _, prepared = _run(manager, "flux-tiny")
    assert "steps_reused" not in prepared.entry.stats, "reverting the cache drops its count"


def test_fp8_scales_per_tensor_or_per_row_and_refuses_another_granularity():
    import torchao.quantization as tq

    from studio.optimizations.base import Context
    from studio.optimizations.quantization import CONFIGS

    for granularity, kind in (("tensor", tq.PerTensor), ("row", tq.PerRow)):
        ctx = Context("cuda:0", devices.detect(), technique_settings={"fp8": {"granularity": granularity}})
        assert all(isinstance(g, kind) for g in CONFIGS["fp8"](tq, ctx).granularity), granularity
    with pytest.raises(ValidationError, match="fp8 granularity must be one of tensor, row"):
        _request("flux-tiny", settings={"fp8": {"granularity": "block"}})


def _float32_tensors_at(originals: dict[int, torch.Size]) -> list[torch.Tensor]:
    """The live float32 tensors that start at one of `originals`' addresses with that original's shape (an
    address alone can be reused by the float8 copy once the original is freed). Plain tensors only: the
    compiler's fake tensors left from other tests have no memory."""
    gc.collect()
    return [
        o
        for o in gc.get_objects()
        if type(o) in (torch.Tensor, torch.nn.Parameter)
        and o.dtype == torch.float32
        and originals.get(o.data_ptr()) == o.shape
    ]


@pytest.mark.parametrize("originals", ["memory", "auto"])
def test_layerwise_casting_stores_float8_and_puts_the_same_weights_back(
    manager, originals, tmp_path, monkeypatch
):
    """The originals wait in memory (the same tensors come back) or, auto on a CPU, in a file under the
    studio's home, so that the process's memory drops (the same values come back, the file goes)."""
    monkeypatch.setenv("STUDIO_HOME", str(tmp_path))
    _, base = _run(manager, "flux-tiny")
    model = base.pipe.transformer
    params = {n: (p, p.data_ptr(), p.detach().clone()) for n, p in model.named_parameters()}
    settings = {"layerwise_casting": {"originals": originals}}
    _, prepared = _run(manager, "flux-tiny", ("layerwise_casting",), settings)
    dtypes = {p.dtype for p in prepared.pipe.transformer.parameters()}
    assert torch.float8_e4m3fn in dtypes and torch.float32 in dtypes, "norms and embeddings stay as they are"
    files = list(tmp_path.glob("casting-*/*"))
    assert bool(files) == (originals == "auto"), files
    cast = {params[n][1]: p.shape for n, p in model.named_parameters() if p.dtype == torch.float8_e4m3fn}
    held = _float32_tensors_at(cast)
    assert cast and bool(held) == (originals == "memory"), f"{len(held)} originals held in memory"
    _run(manager, "flux-tiny")
    after = dict(model.named_parameters())
    assert all(after[n] is p and torch.equal(p, value) for n, (p, _, value) in params.items())
    if originals == "memory":
        assert all(p.data_ptr() == at for p, at, _ in params.values())
    assert not list(tmp_path.glob("casting-*")), "revert removes the file"


def test_layerwise_casting_skip_embeddings_casts_the_adaptive_norms_linears_too(manager):
    for skip, dtype in (("default", torch.float32), ("embeddings", torch.float8_e4m3fn)):
        _, prepared = _run(
            manager, "flux-tiny", ("layerwise_casting",), {"layerwise_casting": {"skip": skip}}
        )
        blocks = prepared.pipe.transformer.transformer_blocks
        assert (
            blocks[0].norm1.linear.weight.dtype == dtype and blocks[0].ff.net[2].weight.dtype != torch.float32
        )
    _run(manager, "flux-tiny")
    assert blocks[0].norm1.linear.weight.dtype == torch.float32


def test_group_offload_pages_from_disk_on_a_cpu_and_removes_its_files(manager, tmp_path, monkeypatch):
    monkeypatch.setenv("STUDIO_HOME", str(tmp_path))
    with pytest.raises(UnavailableError, match="offload_to=cpu .* no other memory to offload to"):
        _request("flux-tiny", ["group_offload"], {"group_offload": {"offload_to": "cpu"}})
    before = _hook_leftovers(_run(manager, "flux-tiny")[1].pipe.transformer)
    _, prepared = _run(manager, "flux-tiny", ("group_offload",))
    assert list(tmp_path.glob("offload-*/*.safetensors")), "auto on a CPU offloads to disk"
    weights = list(prepared.pipe.transformer.parameters())
    size = sum(p.numel() * p.element_size() for p in weights)
    held = sum(p.untyped_storage().nbytes() for p in weights)
    assert held < size / 100, f"weights waiting on disk still hold {held} of {size} bytes of memory"
    _run(manager, "flux-tiny")
    assert not list(tmp_path.glob("offload-*")) and _hook_leftovers(prepared.pipe.transformer) == before
    assert all(p.untyped_storage().nbytes() == p.numel() * p.element_size() for p in weights)


def test_attention_backend_keeps_the_process_default_and_refuses_what_cannot_run():
    default = dispatch._AttentionBackendRegistry._active_backend
    with pytest.raises(UnavailableError, match=r"backend=flash cannot run here: .*flash-attn"):
        _request("flux-tiny", ["attention_backend"], {"attention_backend": {"backend": "flash"}})
    with pytest.raises(UnavailableError, match="attention_backend switches diffusers' attention dispatcher"):
        _request("sd3-tiny", ["attention_backend"])
    assert dispatch._AttentionBackendRegistry._active_backend == default


@pytest.mark.parametrize(
    ("name", "words"),
    [
        ("channels_last", "has no convolutions to speed up in a transformer"),
        ("deepcache", "caches a UNet's deep blocks"),
        ("token_merging", "BasicTransformerBlocks of SD UNets"),
        ("jit_trace_unet", "traces an SD 1.x UNet"),
        ("sdpa", "on a transformer use attention_backend"),
        ("cfg_cutoff", "guidance-distilled"),
    ],
)
def test_unet_techniques_are_refused_on_a_transformer_with_the_reason(name, words):
    reason = unavailable_reason(REGISTRY[name], devices.detect(), "cpu", "flux")
    assert reason.startswith(f"{name} ") and words in reason and "not on a flux pipeline" in reason
    with pytest.raises(UnavailableError, match=words):
        _request("flux-tiny", [name])


def test_fp8_needs_fp8_tensor_cores(fake_gpus):
    assert "needs CUDA" in unavailable_reason(REGISTRY["fp8"], devices.detect(), "cpu", "flux")
    ampere = fake_gpus(1, major=8)
    assert "compute capability 8.9" in unavailable_reason(REGISTRY["fp8"], ampere, "cuda:0", "flux")
    hopper = fake_gpus(1, major=9)
    assert unavailable_reason(REGISTRY["fp8"], hopper, "cuda:0", "flux") is None


def test_the_cli_lists_the_reasons_for_the_model_given():
    from studio.cli import main

    rows = {}
    import contextlib
    import io
    import json

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["optimizations", "--model", "sd3-tiny", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(out.getvalue())}
    assert "no convolutions" in rows["channels_last"]["unavailable"]
    assert (
        rows["fused_qkv"]["unavailable"] is None
        and rows["first_block_cache"]["works_on"] == "flux transformers"
    )


@pytest.mark.slow
@pytest.mark.parametrize("model", sorted(BOUNDS))
def test_regional_compile_of_the_transformer_blocks_matches_and_reverts(
    manager, baselines, model, monkeypatch
):
    """Dynamo compiles each repeated block class and nothing else, and reverting gives back the baseline's
    image. Inductor runs the graphs dynamo hands it as they are (test_compile.eager_graphs): its numbers on
    these transformers, whole, are checked by test_within_its_bound_then_reverts_exactly's aot_package case,
    and in regional compilation on the UNet by test_compile; here they would cost some forty C++ builds."""
    eager_graphs(monkeypatch)
    settings = {"torch_compile": {"regional": True}}
    images, prepared = _run(manager, model, ("torch_compile",), settings)
    compiled = {
        type(m).__name__ for m in prepared.pipe.transformer.modules() if "_compiled_call_impl" in vars(m)
    }
    assert compiled == (
        {"FluxTransformerBlock", "FluxSingleTransformerBlock"}
        if model == "flux-tiny"
        else {"JointTransformerBlock"}
    )
    assert max_abs_diff(images, baselines[model]) <= 1e-4
    assert np.array_equal(_run(manager, model)[0], baselines[model])
