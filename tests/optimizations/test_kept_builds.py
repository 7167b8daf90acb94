"""What a technique builds is kept for its next apply and released with its pipeline: a studio that
applies and reverts all day keeps a flat memory (`studio.optimizations.kept`; long runs: benchmarks/soak)."""

from __future__ import annotations

import gc
import sys
import textwrap

import numpy as np
import psutil
import pytest
import torch
from diffusers import UNet2DConditionModel
from torch._C._dynamo.eval_frame import _debug_get_cache_entry_list

from studio import report
from studio.errors import ValidationError
from studio.optimizations import kept
from studio.request import build_request
from studio.sweeps.compare import run_compare
from tests import warm_python

PROMPT = "a big red circle on the left, on a black background"
REAPPLIES = 8
# Each apply of the traced UNet grew the process by ~15 MB and each torch.compile by ~7 MB before builds were
# kept (bundled model, 64x64): 8 re-applies grew it by 60-120 MB. Kept, it stays within the allocator's noise.
BOUND_MB = 25


def request(**kw):
    return build_request(model="tiny-shapes", prompt=PROMPT, seed=3, steps=2, **kw)


def rss_mb() -> float:
    gc.collect()
    return psutil.Process().memory_info().rss / 2**20


@pytest.mark.slow
@pytest.mark.parametrize("technique", ["jit_trace_unet", "torch_compile"])
def test_alternating_with_the_baseline_builds_once_and_keeps_memory_flat(studio, technique):
    torch._dynamo.reset()  # an earlier test's graph of this UNet class would serve the first apply
    first = studio.generate(request(optimizations=[technique]))
    assert report.single_record(first)["recompiles"] == 1  # built on the first apply
    studio.generate(request())
    warm = rss_mb()
    for _ in range(REAPPLIES):
        again = studio.generate(request(optimizations=[technique]))
        assert report.single_record(again)["recompiles"] is None, "the second apply built its graph again"
        assert np.array_equal(again.arrays, first.arrays)
        studio.generate(request())
    grown = rss_mb() - warm
    assert grown < BOUND_MB, f"{technique}: {grown:.0f} MB more after {REAPPLIES} applies and reverts"


@pytest.mark.slow
def test_a_compare_drops_what_its_copy_of_the_pipeline_compiled(studio):
    """A Compare runs on its own copy of the pipeline; dynamo's graphs for that copy go with it (one new
    backend per compile once left every copy's graphs on the UNet's code, ~14 MB each)."""
    code = UNet2DConditionModel.forward.__code__
    before = len(_debug_get_cache_entry_list(code))
    for _ in range(3):
        run_compare(studio, request(), ["torch_compile"], warmup=0, rounds=1)
    assert len(_debug_get_cache_entry_list(code)) - before <= 1


def test_the_store_keeps_the_newest_configurations_and_releases_the_oldest(monkeypatch):
    released = []
    monkeypatch.setattr(kept, "_RELEASERS", [lambda: released.append(True)])
    store = kept.KeptBuilds(2)
    built = []

    def make(name):
        return lambda: built.append(name) or name

    assert store.get_or_make(("unet", "a"), make("a")) == "a"
    assert store.get_or_make(("vae", "a"), make("a-vae")) == "a-vae"  # one configuration, two parts
    store.get_or_make(("unet", "b"), make("b"))
    assert store.get_or_make(("unet", "a"), make("a again")) == "a"  # kept, and now the newest
    assert not released
    store.get_or_make(("unet", "c"), make("c"))  # a third configuration: b, the least recently used, goes
    assert built == ["a", "a-vae", "b", "c"] and released == [True]
    assert store.configurations() == 2 and len(store) == 3
    assert store.get_or_make(("unet", "b"), make("b again")) == "b again"


def test_the_store_size_is_a_setting(monkeypatch):
    monkeypatch.setenv("STUDIO_KEPT_BUILDS", "0")
    store = kept.KeptBuilds(kept.capacity())
    assert store.get_or_make(("unet", "a"), lambda: "a") == "a" and len(store) == 0
    monkeypatch.setenv("STUDIO_KEPT_BUILDS", "many")
    with pytest.raises(ValidationError, match="STUDIO_KEPT_BUILDS must be a whole number between 0 and 64"):
        kept.capacity()


FORGET_TRACES = textwrap.dedent(
    """
    import torch
    from studio.optimizations import trace

    functions = lambda: len(torch.jit._state._python_cu.get_functions())
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU()).eval()
    x = torch.randn(2, 4)
    first = torch.jit.trace(model, (x,))
    second = torch.jit.trace(model, (x,))
    held = functions()
    del second
    trace.forget_dropped_traces()
    assert functions() == held, "emptied while a traced module was alive"
    assert torch.equal(first(x), model(x))
    del first
    trace.forget_dropped_traces()
    assert functions() == 0, functions()
    assert torch.equal(torch.jit.trace(model, (x,))(x), model(x))  # tracing works after it
    print("ok")
    """
)


def test_torchscript_forgets_traces_once_none_is_alive():
    """TorchScript keeps every traced module's methods after the module is gone; the studio empties its unit
    when no scripted module is left, never while one is (a fresh process: no other test's module alive)."""
    command = [sys.executable, "-c", FORGET_TRACES]
    done = warm_python.run(command, cwd=warm_python.ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().endswith("ok")
