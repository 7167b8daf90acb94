"""Calibration for techniques that quantize activations: a short denoising trajectory run through a model.

Static int8 quantization (PyTorch's `int8_static`, OpenVINO's hybrid int8) needs the ranges of the UNet's
activations on inputs like the ones it will see. `denoising_trajectory` makes such inputs: seeded noise of
the call's shape, denoised for a few steps with a fresh copy of the pipeline's scheduler, each sample of
the batch following its own conditioning (so guided and unguided activations are both seen).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

CALIBRATION_SEED = 0


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
    fresh = type(scheduler).from_config(scheduler.config)
    fresh.set_timesteps(steps)
    generator = torch.Generator().manual_seed(seed)
    latents = torch.randn(sample.shape, generator=generator, dtype=torch.float32).to(sample)
    latents = latents * fresh.init_noise_sigma
    for t in fresh.timesteps:
        step_input = fresh.scale_model_input(latents, t)
        prediction = model(step_input, torch.as_tensor(t, device=sample.device), context)
        latents = fresh.step(prediction, t, latents).prev_sample
    return latents
