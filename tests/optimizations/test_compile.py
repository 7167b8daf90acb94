"""torch_compile (studio.optimizations.compile): regional compilation of the repeated blocks draws what eager
draws and reverts; static graphs are built once per path and per live pipeline, and reused; the inference
settings (freezing, cpp_wrapper) are in force while inductor builds, and nowhere after."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pipelines import loader
from studio.errors import ValidationError
from studio.manager import PipelineManager
from studio.measure import bench
from studio.measure.quality import max_abs_diff
from studio.optimizations.compile import own_outputs
from tests.tiny import STEPS, run
from tests.tiny import technique_request as request


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


def eager_graphs(monkeypatch) -> None:
    """Inductor replaced by running the graph dynamo hands it as is: dynamo still traces, guards and counts
    every graph; the test costs traces, not C++ compiles."""
    import torch._inductor.compile_fx as compile_fx

    monkeypatch.setattr(compile_fx, "compile_fx", lambda graph, example_inputs, **kwargs: graph.forward)


@pytest.mark.slow
def test_static_compile_with_caching_builds_each_path_once_and_draws_what_eager_draws(manager, monkeypatch):
    """dynamic=false with DeepCache and the guidance cut-off: one static graph per cache path (full, cached)
    and per batch size (2, then 1 after the cut-off) on the first run, reused after, and the traced paths draw
    what eager draws. (Inductor's own numbers on the whole UNet are checked by test_manager's torch_compile
    case and the compiled package's tests.)"""
    eager_graphs(monkeypatch)
    eager = run(manager, request(["deepcache", "cfg_cutoff"], settings=STATIC_SETTINGS, steps=STEPS))[0]
    req = request(["deepcache", "cfg_cutoff", "torch_compile"], settings=STATIC_SETTINGS, steps=STEPS)
    with PipelineManager(load=loader.load).acquire(req) as prepared:
        images = bench.run_once(prepared, req).images
        assert prepared.entry.stats["compile_count"] == 4, "full and cached path, at batch 2 then 1"
        bench.run_once(prepared, req)
        assert prepared.entry.stats["compile_count"] == 4, "the same request again builds nothing"
    assert max_abs_diff(images, eager) <= 1e-3, "compiled draws what eager draws"


@pytest.mark.slow
def test_live_pipelines_of_a_class_share_their_static_graphs_within_dynamos_limit(manager, monkeypatch):
    """Dynamo keeps graphs per code object, shared by every UNet of a class: past its limit (8 by default,
    made 2 here) it would run a pipeline eagerly without saying so. The weights are the graphs' inputs, so the
    first pipeline builds its two graphs (DeepCache's full and cached path) and a second live one of the same
    class runs on them: nothing more to build, no limit reached, each drawing what eager draws."""
    eager_graphs(monkeypatch)
    torch._dynamo.reset()  # no graph of an earlier test's UNet
    settings = {"torch_compile": {"dynamic": "false"}}
    eager = run(manager, request(["deepcache"], steps=STEPS))[0]
    req = request(["deepcache", "torch_compile"], settings=settings, steps=STEPS)
    engines = [PipelineManager(load=loader.load) for _ in range(2)]  # both alive
    with torch._dynamo.config.patch(recompile_limit=2):  # put back afterwards
        for number, engine in enumerate(engines, 1):
            with engine.acquire(req) as prepared:
                images = bench.run_once(prepared, req).images
                built = prepared.entry.stats.get("compile_count")
                assert built == (2 if number == 1 else None), f"pipeline {number}: {built} graphs built"
                bench.run_once(prepared, req)
                assert prepared.entry.stats.get("compile_count") == built, (
                    f"pipeline {number}: the same request again"
                )
            assert max_abs_diff(images, eager) <= 1e-3, f"pipeline {number}: its graphs draw what eager draws"


@pytest.mark.parametrize("settings", [{}, {"freezing": True, "cpp_wrapper": True}, {"tuning": "coordinate"}])
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
    torch._dynamo.reset()  # an earlier test's graph of this UNet class would serve it: nothing handed over
    req = request(["torch_compile"], settings={"torch_compile": {"dynamic": "false", **settings}})
    with PipelineManager(load=loader.load).acquire(req) as prepared:
        bench.run_once(prepared, req)
    assert len(seen) == prepared.entry.stats["compile_count"] >= 1
    for graph in seen:
        assert graph["freezing while traced"] is settings.get("freezing", False)
        assert graph.get("cpp_wrapper", False) is settings.get("cpp_wrapper", False)
        tuned = settings.get("tuning") == "coordinate"  # the public Flux recipes' inductor options
        assert graph.get("coordinate_descent_tuning", False) is tuned
        assert graph.get("epilogue_fusion", True) is not tuned
    assert torch._inductor.config.freezing is False and torch._inductor.config.cpp_wrapper is False, "no leak"


def test_an_unknown_tuning_is_refused_before_anything_runs():
    with pytest.raises(ValidationError, match="torch_compile tuning must be one of default, coordinate"):
        request(["torch_compile"], settings={"torch_compile": {"tuning": "fastest"}})


def test_compiled_blocks_under_cuda_graphs_hand_back_their_own_copies():
    """A block's output stays valid after the next block of its class replays the shared CUDA graph: the
    wrapper hands back copies (same values, other storage), nested outputs included."""
    kept = torch.arange(6.0)
    pair = own_outputs(lambda: (kept, {"encoder": kept + 1}))()
    assert torch.equal(pair[0], kept) and torch.equal(pair[1]["encoder"], kept + 1)
    assert pair[0].data_ptr() != kept.data_ptr()
    kept.zero_()  # the next replay writes the graph's buffers
    assert pair[0].sum() == 15.0
