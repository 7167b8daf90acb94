"""Out of memory in one configuration in the middle of a Compare (a fake: CUDA's own error raised by the UNet
where its weights are channels-last): that configuration is failed with the memory techniques to try, the
others still run and are logged, and the sweep's pipeline copies are freed."""

from __future__ import annotations

import torch

from studio.sweeps.compare import run_compare
from tests.tiny import request


def test_one_configuration_out_of_memory_fails_alone_with_advice(studio, monkeypatch):
    from diffusers import UNet2DConditionModel

    real = UNet2DConditionModel.forward

    def forward(self, *args, **kwargs):
        if (
            self.conv_in.weight.is_contiguous(memory_format=torch.channels_last)
            and self.conv_in.weight.ndim == 4
        ):
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(UNet2DConditionModel, "forward", forward)
    loaded = set(studio.manager.loaded())
    result = run_compare(studio, request(steps=2), ["channels_last", "sdpa"], warmup=0, rounds=2)
    status = {r["config"]: r["status"] for r in result.records}
    assert status == {"baseline": "ok", "channels_last": "failed", "sdpa": "ok"}
    failed = next(r for r in result.records if r["config"] == "channels_last")
    assert "Out of memory" in failed["error"] and "vae_slicing" in failed["error"]
    logged = {r["config_label"]: r["status"] for r in studio.runlog.runs(limit=10)}
    assert logged == {"baseline": "ok", "channels_last": "failed", "sdpa": "ok"}
    assert set(studio.manager.loaded()) <= loaded | {
        k for k in studio.manager.loaded() if "sweep" not in str(k)
    }
    assert not [k for k in studio.manager.loaded() if "sweep" in str(k)], "the sweep's copies are freed"
