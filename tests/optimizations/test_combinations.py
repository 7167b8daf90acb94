"""Techniques together: the pairs that cannot be combined are refused by name before any work, and the
pipeline-stage techniques that can be combined are applied at once and reverted to the exact baseline."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from studio.errors import ConflictError
from studio.measure.quality import psnr
from tests.tiny import MODULES, run
from tests.tiny import technique_request as request


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


def test_all_new_pipeline_techniques_together_revert_exactly(manager, baseline):
    names = ["deepcache", "fused_qkv", "sdpa", "channels_last"]
    names += [n for n, mod in MODULES.items() if importlib.util.find_spec(mod) is not None]
    images, prepared = run(manager, request(names))
    assert set(names) <= set(prepared.applied)
    assert (
        np.isfinite(images).all() and psnr(images, baseline) > 10
    )  # measured 13.3 dB at 6 steps, mostly deepcache
    assert np.array_equal(run(manager, request())[0], baseline)
