"""Out of memory in one configuration in the middle of a Compare (a fake: CUDA's own error raised by the UNet
where its weights are channels-last): that configuration is failed with the memory techniques to try, the
others still run and are logged, and the sweep's pipeline copies are freed."""

from __future__ import annotations

from tests.faults import sweeps
from tests.faults.cases import Workspace


def test_one_configuration_out_of_memory_fails_alone_with_advice(tmp_path):
    outcome = sweeps.out_of_memory_case(Workspace(tmp_path))
    status = {r["config"]: r["status"] for r in outcome.facts["records"]}
    assert status == {"baseline": "ok", "channels_last": "failed", "sdpa": "ok"}
    assert outcome.said.startswith("channels_last: Out of memory") and "vae_slicing" in outcome.said
    assert outcome.facts["logged"] == {"baseline": "ok", "channels_last": "failed", "sdpa": "ok"}
    assert not outcome.facts["copies"], "the sweep's copies are freed"
    assert outcome.alive and outcome.runs_lost == 0
