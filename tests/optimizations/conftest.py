"""What the techniques' tests share: one pipeline manager on the bundled model and its baseline images, built
once for the run however many modules use them. A module that needs a manager of its own (a fresh one, or one
at other steps, as test_equivalence.py) defines `manager` and `baseline` itself."""

from __future__ import annotations

import pytest

from pipelines import loader
from studio.manager import PipelineManager
from tests.tiny import run
from tests.tiny import technique_request as request


@pytest.fixture(scope="session")
def manager():
    return PipelineManager(load=loader.load)


@pytest.fixture(scope="session")
def baseline(manager):
    """The image at the techniques' STEPS with no technique."""
    return run(manager, request())[0]


@pytest.fixture(scope="session")
def baseline20(manager):
    """The image at 20 steps, the bundled model's own count, with no technique."""
    return run(manager, request(steps=20))[0]
