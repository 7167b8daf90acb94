"""The pipeline manager on the bundled model: every CPU technique applies within tolerance,
reverts to the exact baseline, and switching never re-reads weights from disk."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

from pipelines import loader
from studio.errors import ValidationError
from studio.manager import PipelineManager
from studio.measure import bench
from studio.measure.quality import max_abs_diff, psnr
from tests.tiny import request, run


class CountingLoader:
    def __init__(self):
        self.calls = 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return loader.load(*args, **kwargs)


@pytest.fixture(scope="module")
def counting():
    return CountingLoader()


@pytest.fixture(scope="module")
def manager(counting):
    return PipelineManager(load=counting)


@pytest.fixture(scope="module")
def baseline(manager):
    return run(manager, request())[0]


def test_a_sweep_counts_the_weight_copies_a_technique_keeps(manager):
    """OpenVINO's compiled parts hold their own weights, more with Winograd's larger convolution weights, but
    a sweep's pipeline for it shares the loaded ones (it only reads them): one copy's bytes, not two; with a
    technique that may write the weights beside it, the pipeline copies them again."""
    plain = manager.model_bytes(request())
    assert plain > 0 and manager.model_bytes(request(["channels_last"])) == plain
    assert manager.model_bytes(request(["openvino"])) == plain
    winograd = request(["openvino"], {"openvino": {"winograd": True}})
    assert manager.model_bytes(winograd) == int(1.4 * plain)
    assert manager.model_bytes(request(["openvino", "vae_tiling"])) == 2 * plain


def test_a_sweeps_own_pipeline_copies_the_weights_unless_its_techniques_only_read_them(manager):
    """channels_last rewrites the weights' layout: its sweep pipeline holds tensors of its own. OpenVINO only
    reads them: its sweep pipeline shares the loaded tensors but not the modules, so what it swaps in (the
    VAE's decoder) stays out of the shared pipeline."""
    loaded, _ = manager._entry(request())
    with manager.own_pipelines("sweep-own"):
        copied, _ = manager._slot_entry(request(["channels_last"]), ("sweep-own", "channels_last"))
        shared, _ = manager._slot_entry(request(["openvino"]), ("sweep-own", "openvino"))
    base_weight = loaded.base.unet.conv_in.weight
    assert copied.base.unet.conv_in.weight.data_ptr() != base_weight.data_ptr()
    assert torch.equal(copied.base.unet.conv_in.weight, base_weight)
    assert shared.base.unet.conv_in.weight is base_weight
    assert shared.base.vae is not loaded.base.vae and shared.base.vae.decoder is not loaded.base.vae.decoder
    shared.base.vae.decoder = torch.nn.Identity()
    assert not isinstance(loaded.base.vae.decoder, torch.nn.Identity), "the swap stayed in the copy"


def test_vae_tiling_changes_little_and_reverts(manager):
    big = request(width=128, height=128)
    ref = run(manager, big)[0]
    with manager.acquire(request(["vae_tiling"], width=128, height=128)) as prepared:
        assert prepared.pipe.vae.use_tiling
        tiled = bench.run_once(prepared, request(["vae_tiling"], width=128, height=128)).images
    assert max_abs_diff(tiled, ref) > 0, "tiling did not engage at 128x128"
    # the bundled VAE tiles at 64 px, so 128 px is nine blended tiles: seams, but the same picture
    assert psnr(tiled, ref) > 14, f"tiled decode differs too much: {psnr(tiled, ref):.1f} dB"
    images, prepared = run(manager, big)
    assert not prepared.pipe.vae.use_tiling
    assert np.array_equal(images, ref)


def test_attention_processors_are_switched_and_restored(manager):
    from diffusers.models.attention_processor import AttnProcessor, AttnProcessor2_0, SlicedAttnProcessor

    def kinds(prepared):
        return {type(p) for p in prepared.pipe.unet.attn_processors.values()}

    with manager.acquire(request(["classic_attention"])) as p:
        assert kinds(p) == {AttnProcessor}
    with manager.acquire(request(["attention_slicing"])) as p:
        assert kinds(p) == {SlicedAttnProcessor}
    with manager.acquire(request()) as p:
        assert kinds(p) == {AttnProcessor2_0}


def test_channels_last_really_changes_the_layout(manager):
    import torch

    with manager.acquire(request(["channels_last"])) as p:
        assert p.pipe.unet.conv_in.weight.is_contiguous(memory_format=torch.channels_last)
    with manager.acquire(request()) as p:
        assert p.pipe.unet.conv_in.weight.is_contiguous()


def test_trace_is_reverted_to_the_loaded_unet(manager):
    with manager.acquire(request()) as p:
        original = p.pipe.unet
    with manager.acquire(request(["jit_trace_unet"])) as p:
        assert type(p.pipe.unet).__name__ == "TracedUNet"
    with manager.acquire(request()) as p:
        assert p.pipe.unet is original


def test_switching_never_rereads_weights(manager, counting, baseline):
    loads = counting.calls
    for optimizations in (
        ["channels_last"],
        ["jit_trace_unet"],
        [],
        ["classic_attention", "vae_slicing"],
        [],
    ):
        run(manager, request(optimizations))
    assert counting.calls == loads, "a configuration switch read the weights from disk again"
    run(manager, request(["bf16"]))
    assert counting.calls == loads or counting.calls == loads + 1  # bf16 is its own (model, dtype) entry


def test_each_request_gets_its_own_scheduler(manager):
    with manager.acquire(request()) as p:
        first = p.pipe.scheduler
    with manager.acquire(request()) as p:
        assert p.pipe.scheduler is not first
        assert type(p.pipe.scheduler) is type(first)
    with manager.acquire(request(scheduler="euler")) as p:
        assert type(p.pipe.scheduler).__name__ == "EulerDiscreteScheduler"


def test_a_scheduler_that_cannot_take_the_steps_is_refused_before_any_technique_runs(monkeypatch):
    # PNDM with its Runge-Kutta warm-up (as some hub models configure it) needs 4 steps or more; diffusers
    # would fail inside the call with a numpy broadcasting error
    from pipelines import schedulers

    monkeypatch.setitem(schedulers.SCHEDULERS, "pndm", ("PNDMScheduler", {"skip_prk_steps": False}))
    fresh = PipelineManager()
    with pytest.raises(ValidationError, match=r"pndm scheduler \(PNDMScheduler.*cannot take 3 steps"):
        with fresh.acquire(request(["channels_last"], scheduler="pndm", steps=3)):
            pass
    (entry,) = fresh._entries.values()
    assert entry.applied == (), "a technique was applied for a request that could not run"
    with pytest.raises(ValidationError, match="cannot take 3 steps"):  # asked again: refused again
        with fresh.acquire(request(scheduler="pndm", steps=3)):
            pass
    with fresh.acquire(request(scheduler="pndm", steps=4)) as prepared:
        assert type(prepared.pipe.scheduler).__name__ == "PNDMScheduler"


def test_concurrent_requests_match_sequential_ones(manager):
    reqs = [request(seed=s) for s in (11, 12, 13)]
    alone = [run(manager, r)[0] for r in reqs]
    results: dict[int, np.ndarray] = {}

    def worker(i):
        results[i] = run(manager, reqs[i])[0]

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i in range(3):
        assert np.array_equal(results[i], alone[i])


@pytest.mark.slow
def test_torch_compile_on_cpu_matches_and_reverts(manager, baseline):
    req = request(["torch_compile"])
    with manager.acquire(req) as prepared:
        first = bench.run_once(prepared, req)
        builds = prepared.entry.stats.get("compile_count", 0)
        second = bench.run_once(prepared, req)
        assert type(prepared.pipe.unet).__name__ == "OptimizedModule"
        assert builds >= 1 and prepared.entry.stats["compile_seconds"] > 0, "each graph built is counted"
        assert prepared.entry.stats["compile_count"] == builds, "the same shape again compiles nothing"
    assert max_abs_diff(second.images, baseline) <= 1e-3
    assert first.seconds > second.seconds, "the first compiled call should pay the compile time"
    assert np.array_equal(run(manager, request())[0], baseline)
