"""The GPU benchmark's CUDA paths on the bundled model (a pre-flight for the long run): the matmul peak and
the UNet's FLOPs on the GPU, and every section with `--tiny` (the dry run's numbers on the GPU)."""

from __future__ import annotations

import json

import pytest
import torch

from benchmarks.gpu import bench, limit, targets
from tests.tiny import request

DEVICE = "cuda:0"
pytestmark = pytest.mark.gpu


def test_matmul_peak_is_measured_on_the_gpu():
    flops = limit.matmul_peak(DEVICE, torch.float16, 1024)
    assert flops > 1e12, f"{flops / 1e12:.2f} TFLOP/s in fp16 on {torch.cuda.get_device_name(0)}"


def test_unet_flops_are_counted_on_the_gpu(studio):
    flops, batch, calls = limit.unet_flops(studio, request(["fp16"], steps=2, device=DEVICE))
    assert flops > 0 and batch == 2 and calls >= 2


def test_every_section_runs_on_the_gpu_with_small_numbers(tmp_path):
    bench.main(
        ["--tiny", "--out", str(tmp_path / "out"), "--work", str(tmp_path / "work"), "--budget-s", "300"]
    )
    data = json.loads((tmp_path / "out" / "results.json").read_text())
    assert data["device"] == DEVICE and data["environment"]["cuda_available"]
    rows = data["techniques"]["sd15"]["rows"]
    measured = [r for r in rows if r["status"] == "ok" and r["technique"] != "baseline"]
    assert len(measured) >= 10, [(r["technique"], r["status"], r["error"]) for r in rows]
    failed = [(r["technique"], r["error"]) for r in rows if r["status"] == "failed"]
    assert not failed, failed
    memory = {r["technique"]: r for r in data["memory"]["sd15"]["rows"]}
    assert memory["model_cpu_offload"]["status"] == "ok", memory["model_cpu_offload"]["error"]
    assert all(r["status"] in ("ok", "skipped") for r in data["ladder"]["sd15"]["rows"])
    assert data["compute-limit"]["sd15"]["fraction_of_peak"] > 0
    assert [t["target"] for t in data["targets"]] == [t.stated for t in targets.TARGETS]
    assert (tmp_path / "out" / "results.md").is_file() and (tmp_path / "out" / "images.png").is_file()
