"""tf32 and cudnn_benchmark switch global PyTorch flags around the pipeline call only: on during the call, as
they were after it, also when the call fails."""

from __future__ import annotations

import pytest
import torch

from studio.manager import PipelineManager
from studio.measure import bench
from tests.tiny import request

DEVICE = "cuda:0"
pytestmark = pytest.mark.gpu


def flags() -> tuple[bool, bool, bool]:
    return (
        torch.backends.cuda.matmul.allow_tf32,
        torch.backends.cudnn.allow_tf32,
        torch.backends.cudnn.benchmark,
    )


@pytest.fixture(scope="module")
def manager():
    return PipelineManager()


def run_seeing_flags(manager: PipelineManager, fail: bool = False) -> list[tuple[bool, bool, bool]]:
    """Run fp16+tf32+cudnn_benchmark, recording the flags at each UNet call (raising in the first if
    `fail`)."""
    seen: list[tuple[bool, bool, bool]] = []

    def look(module, args):
        seen.append(flags())
        if fail:
            raise RuntimeError("injected failure")

    req = request(["fp16", "tf32", "cudnn_benchmark"], steps=2, device=DEVICE)
    with manager.acquire(req) as prepared:
        hook = prepared.pipe.unet.register_forward_pre_hook(look)
        try:
            bench.run_once(prepared, req)
        finally:
            hook.remove()
    return seen


def test_flags_are_on_during_the_call_and_as_before_after_it(manager):
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.benchmark = False
    before = flags()
    seen = run_seeing_flags(manager)
    assert seen and all(s == (True, True, True) for s in seen), seen
    assert flags() == before


def test_flags_are_restored_when_the_call_fails(manager):
    before = flags()
    with pytest.raises(RuntimeError, match="injected failure"):
        run_seeing_flags(manager, fail=True)
    assert flags() == before
