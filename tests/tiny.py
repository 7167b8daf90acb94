"""The one request helper for tests on the bundled model: a checked tiny-shapes request and one
measured call; the techniques' tests' step count and the optional packages some techniques need."""

from __future__ import annotations

import importlib.util
from typing import Any

import pytest

from studio.measure import bench
from studio.request import GenerationRequest, build_request

PROMPT = "a big red circle on the left, on a white background"
STEPS = 6  # what the techniques' tests (tests/optimizations) run unless they say otherwise

# The technique -> the optional package (requirements-extras.txt) it needs.
MODULES = {"token_merging": "tomesd", "int8_dynamic": "torchao"}
needs_tomesd = pytest.mark.skipif(
    importlib.util.find_spec("tomesd") is None, reason="tomesd is not installed"
)
needs_torchao = pytest.mark.skipif(
    importlib.util.find_spec("torchao") is None, reason="torchao is not installed"
)


def request(
    optimizations: Any = (), settings: dict | None = None, steps: int = 4, **kw: Any
) -> GenerationRequest:
    """tiny-shapes, seed 3, `steps` steps at the model's 64x64, with `optimizations` and their `settings`."""
    args = {"model": "tiny-shapes", "prompt": PROMPT, "seed": 3, "steps": steps, **kw}
    return build_request(optimizations=list(optimizations), settings=settings, **args)


def technique_request(
    optimizations: Any = (), settings: dict | None = None, steps: int = STEPS, **kw: Any
) -> GenerationRequest:
    """`request` at the techniques' tests' STEPS."""
    return request(optimizations, settings, steps=steps, **kw)


def run(manager: Any, req: GenerationRequest):
    """One synchronised call of `req` through `manager`: its images and what the manager prepared."""
    with manager.acquire(req) as prepared:
        return bench.run_once(prepared, req).images, prepared


def fidelity(images: Any, prompt: str = PROMPT) -> dict:
    """What the bundled model's own judge (its spec's prompt_fidelity hook) sees of `prompt` in the first
    image."""
    from studio.measure.quality import prompt_fidelity

    spec = build_request(model="tiny-shapes", prompt=prompt).spec
    return prompt_fidelity(images[0], prompt, spec.hook("prompt_fidelity"))
