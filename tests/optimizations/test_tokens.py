"""Token merging (studio.optimizations.tokens, with tomesd): the UNet's transformer blocks are patched while
it is on and every trace of the patch is gone after; with nothing merged it draws the baseline exactly."""

from __future__ import annotations

import numpy as np

from tests.tiny import needs_tomesd, run
from tests.tiny import technique_request as request


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
