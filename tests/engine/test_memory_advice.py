"""Out of memory: the studio names the memory techniques to retry with, ranked by what the run log
measured."""

from __future__ import annotations

import pytest
import torch

from studio.engine import memory_advice
from studio.engine.run_data import run_columns
from studio.errors import OutOfMemory
from studio.request import build_request
from studio.runlog import RunLog

GB = 2**30
PROMPT = "a big green star on the right, on a white background"


def request(**kw):
    return build_request(**{"model": "tiny-shapes", "prompt": PROMPT, "seed": 1, "steps": 2, **kw})


def log_run(runlog: RunLog, optimizations: list[str], peak: int, device: str = "cpu", size: int = 64) -> None:
    req = build_request(
        model="tiny-shapes",
        prompt=PROMPT,
        seed=1,
        steps=2,
        optimizations=optimizations,
        device=device,
        width=size,
        height=size,
    )
    run_id = runlog.start_run(run_columns(req, 0, 1, None))
    runlog.finish_run(run_id, "ok", peak_memory=peak, latency_s=1.0)


def test_advice_ranks_measured_savings_first_and_knows_what_fits_a_gpu(runlog, fake_gpus):
    fake_gpus(1)  # one 24 GB GPU
    for peak in (30 * GB, 32 * GB):
        log_run(runlog, [], peak, device="cuda:0")
    log_run(runlog, ["model_cpu_offload"], 10 * GB, device="cuda:0")
    log_run(runlog, ["vae_tiling"], 28 * GB, device="cuda:0")
    log_run(runlog, ["vae_tiling"], 5 * GB, device="cuda:0", size=128)  # another size: not evidence
    log_run(runlog, ["vae_slicing"], 1 * GB, device="cpu")  # another device type: not evidence
    advice = memory_advice.advise(runlog, request(device="cuda:0"))
    names = [a.name for a in advice]
    assert names[:2] == ["model_cpu_offload", "vae_tiling"]
    offload, tiling = advice[0], advice[1]
    assert offload.fits is True and offload.saving == pytest.approx(1 - 10 / 31)
    assert tiling.fits is False and tiling.saving == pytest.approx(1 - 28 / 31)
    assert {"vae_slicing", "sequential_cpu_offload"} <= set(names[2:])
    assert all(a.saving is None for a in advice[2:]), "unmeasured techniques come last, marked as such"


def test_out_of_memory_error_names_techniques_available_here_and_not_already_requested(studio, monkeypatch):
    from diffusers import UNet2DConditionModel

    def oom(self, *a, **k):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(UNet2DConditionModel, "forward", oom)
    with pytest.raises(OutOfMemory) as info:
        studio.generate(request(optimizations=["vae_slicing"]))
    message = str(info.value)
    assert "vae_tiling (not measured yet" in message and "--opt vae_tiling" in message
    assert "vae_slicing (" not in message, "already requested"
    assert "model_cpu_offload" not in message, "needs a GPU; this run is on the CPU"
    assert "vae_tiling" in info.value.advice
    row = studio.runlog.runs(limit=1)[0]
    assert row["status"] == "failed" and "Memory techniques to retry with" in row["error"]
