"""DeepCache (studio.optimizations.caching): between full steps the deep blocks' features are reused, not
recomputed, and every block runs at every step again once it is reverted; it costs much more quality at few
steps than at many; a branch deeper than the UNet is refused with a sentence."""

from __future__ import annotations

import numpy as np
import pytest

from studio.errors import ValidationError
from studio.measure.quality import psnr
from tests.tiny import run
from tests.tiny import technique_request as request


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
