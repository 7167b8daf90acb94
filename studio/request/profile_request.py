"""What Profile asks of a request beyond a generate's checks: a step to warm up before the profiled one."""

from __future__ import annotations

from studio.errors import ValidationError
from studio.request.generation import GenerationRequest

MIN_PROFILE_STEPS = 2


def validate_profile(request: GenerationRequest) -> GenerationRequest:
    """`request`, if it can be profiled: step 1 warms up, step 2 is profiled (step 3, when there is one,
    is timed without the profiler).

    Raises:
        ValidationError: fewer than 2 steps.
    """
    if request.steps < MIN_PROFILE_STEPS:
        raise ValidationError(
            f"Profile needs at least {MIN_PROFILE_STEPS} steps (the first warms up, the second is profiled); "
            f"set steps to {MIN_PROFILE_STEPS} or more."
        )
    return request
