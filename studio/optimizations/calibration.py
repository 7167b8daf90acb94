"""Calibration for techniques that quantize activations: a short denoising trajectory run through a model.

Static int8 quantization (PyTorch's `int8_static`, OpenVINO's hybrid int8) needs the ranges of the UNet's
activations on inputs like the ones it will see. `denoising_trajectory` makes such inputs: seeded noise of
the call's shape, denoised for a few steps with a fresh copy of the pipeline's scheduler, each sample of
the batch following its own conditioning (so guided and unguided activations are both seen). The run is a
generator (`denoising_steps`), so that the model's predictions can come from wherever the inputs are
already being run (NNCF's statistics inference: `openvino.statistics.Denoised`).
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

import torch

from pipelines.schedulers import fresh_scheduler

CALIBRATION_SEED = 0


Inputs = tuple[torch.Tensor, torch.Tensor, torch.Tensor]
# A denoising run as a generator: yields each model call's inputs (latents, timestep, context), is sent the
# model's prediction for them, and returns what the run ends at.
Steps = Generator[Inputs, torch.Tensor, Any]


def denoising_steps(
    sample: torch.Tensor, context: torch.Tensor, scheduler: Any, steps: int, seed: int = CALIBRATION_SEED
) -> Steps:
    """`steps` denoising steps from seeded noise shaped like `sample`, with a fresh scheduler made from
    `scheduler`'s config: yields each model call's inputs, is sent its prediction; returns the latents it ends
    at. `answer` runs it with a model; a caller that gets the predictions elsewhere sends them itself."""
    fresh = fresh_scheduler(scheduler, steps)
    generator = torch.Generator().manual_seed(seed)
    latents = torch.randn(sample.shape, generator=generator, dtype=torch.float32).to(sample)
    latents = latents * fresh.init_noise_sigma
    for t in fresh.timesteps:
        step_input = fresh.scale_model_input(latents, t)
        prediction = yield step_input, torch.as_tensor(t, device=sample.device), context
        latents = fresh.step(prediction, t, latents).prev_sample
    return latents


def answer(run: Steps, model: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]) -> Any:
    """Run `run` to its end, answering each call's inputs with `model`'s prediction; what it returns."""
    try:
        inputs = next(run)
        while True:
            inputs = run.send(model(*inputs))
    except StopIteration as done:
        return done.value


def denoising_trajectory(
    model: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor],
    sample: torch.Tensor,
    context: torch.Tensor,
    scheduler: Any,
    steps: int,
    seed: int = CALIBRATION_SEED,
) -> torch.Tensor:
    """Run `model(latents, timestep, context)` along `steps` denoising steps from seeded noise shaped like
    `sample`, with a fresh scheduler made from `scheduler`'s config; the latents it ends at."""
    return answer(denoising_steps(sample, context, scheduler, steps, seed), model)
