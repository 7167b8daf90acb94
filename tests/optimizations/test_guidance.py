"""The guidance cut-off (studio.optimizations.guidance, cfg_cutoff): after a fraction of the steps the UNet
runs one sample instead of two, and the next run without it is guided throughout; a fraction outside 0.05 to
1.0 is refused with a sentence."""

from __future__ import annotations

import numpy as np
import pytest

from studio.errors import ValidationError
from tests.tiny import run
from tests.tiny import technique_request as request


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
