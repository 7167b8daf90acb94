"""threads (studio.optimizations.runtime): torch's intra-op thread count is set for the call only (the
physical cores by default, or num_threads) and restored after; another count changes the image only in its
last bits (another summation order; AMD EPYC Zen 3, 1 against 2 threads: 4.8e-6 max-abs, 125 dB)."""

from __future__ import annotations

import numpy as np
import torch

from studio.measure import bench
from studio.measure.quality import max_abs_diff, psnr
from studio.optimizations import Context
from studio.optimizations.runtime import num_threads, physical_cores
from tests.optimizations.test_equivalence import EXACTISH
from tests.tiny import technique_request as request


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
    if before == physical_cores():
        assert np.array_equal(images, baseline), "the same thread count must draw the same image"
    else:  # the baseline was drawn with another count (one per pytest-xdist worker)
        assert max_abs_diff(images, baseline) <= EXACTISH.max_abs
        assert psnr(images, baseline) >= EXACTISH.min_psnr


def test_threads_setting_reaches_the_call(manager):
    seen = []
    req = request(["threads"], settings={"threads": {"num_threads": 1}})
    with manager.acquire(req) as prepared:
        bench.run_once(prepared, req, on_step=lambda i, n: seen.append(torch.get_num_threads()))
    assert set(seen) == {1}
