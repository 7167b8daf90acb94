"""The samples NNCF calibrates the `openvino` technique's int8 parts on: the UNet's inputs along a denoising
trajectory per calibration prompt, at the call's size and steps, and the VAE decoder's inputs for the latents
those trajectories end at.

A UNet's samples are spread over each trajectory (at most `CALIBRATION_SAMPLES` in all) and made as NNCF
goes (`openvino.statistics.Denoised`): each one is denoised by NNCF's own inference of it, the calls between
samples by the converted fp32 UNet.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from pipelines.schedulers import denoiser_calls
from studio.optimizations.calibration import Inputs, Steps, answer, denoising_steps
from studio.optimizations.openvino import statistics as ovs

# The most UNet calls a calibrated UNet is calibrated on: NNCF's statistics cost ~5 s a sample for SD 1.5 at
# 256x256 on a 2-core CPU, so a 50-step request would pay five times what a 10-step one pays for the same
# spread of timesteps. 48 covers 10 steps of the four calibration prompts (PNDM: 11 calls each, 44 in all).
CALIBRATION_SAMPLES = 48


def spread(length: int, runs: int, most: int) -> list[int]:
    """Which calls of a run of `length` to keep when `runs` such runs give at most `most` in all: the same
    number from each run, evenly spaced along it from its first call to its last."""
    keep = max(1, min(length, most // max(1, runs)))
    return sorted({round(i * (length - 1) / max(1, keep - 1)) for i in range(keep)})


def trajectory_steps(pipe: Any, prompts: tuple[str, ...], sample: torch.Tensor, steps: int) -> Steps:
    """A denoising run of `steps` per calibration prompt, one after another (`calibration.denoising_steps`),
    from seeded noise shaped like `sample` (batch 2 or more), the batch's first half unguided and the rest
    guided by the prompt (the pipeline's order); returns the latents each run ends at."""
    ends = []
    for seed, prompt in enumerate(prompts):
        with torch.no_grad():
            cond, uncond = pipe.encode_prompt(prompt, sample.device, 1, True, None)
        half = sample.shape[0] // 2
        context = torch.cat([uncond] * half + [cond] * (sample.shape[0] - half))
        ends.append((yield from denoising_steps(sample, context, pipe.scheduler, steps, seed)))
    return ends


def trajectories(
    pipe: Any, prompts: tuple[str, ...], model: Any, sample: torch.Tensor, steps: int
) -> list[torch.Tensor]:
    """`trajectory_steps` run by `model(latents, t, context)`; the latents each trajectory ends at."""
    with torch.no_grad():
        return answer(trajectory_steps(pipe, prompts, sample, steps), model)


def unet_samples(
    pipe: Any,
    prompts: tuple[str, ...],
    inputs: tuple[torch.Tensor, ...],
    steps: int,
    fp32: Callable[[], Callable[..., torch.Tensor]],
    output_name: str,
) -> ovs.Denoised:
    """NNCF's samples for a UNet called with `inputs`: its inputs along a denoising trajectory per prompt, at
    this call's shape and `steps`; at most `CALIBRATION_SAMPLES` of them, spread evenly over each trajectory.
    Each sample is denoised by NNCF's inference of it (the model being quantized, in fp32 math; in
    hybrid_int8 with its Linear layers' 8-bit weights, as it will run), the calls between samples by the
    converted fp32 UNet `fp32()` compiles (the PyTorch UNet's function to fp32 rounding, ~1.5x faster on a
    CPU); `output_name`: the model's output NNCF's inference answers with."""
    sample, timestep, _ = inputs
    runs, length = len(prompts), denoiser_calls(pipe.scheduler, steps)
    picks = [run * length + i for run in range(runs) for i in spread(length, runs, CALIBRATION_SAMPLES)]
    # calls between samples run through the fp32 UNet compiled now, before the model is rewritten; where
    # every call is a sample, it is compiled only if NNCF leaves one unanswered
    compiled = fp32() if len(picks) < runs * length else None

    def denoiser() -> Any:
        return compiled if compiled is not None else fp32()

    def prepare(inputs: Inputs) -> tuple[torch.Tensor, ...]:
        x, t, c = inputs
        return x, t.to(timestep.dtype).reshape(timestep.shape), c

    run = trajectory_steps(pipe, prompts, sample, steps)
    return ovs.Denoised(run, prepare, picks, output_name, denoiser)


def decoder_samples(pipe: Any, prompts: tuple[str, ...], sample: torch.Tensor, steps: int) -> list[tuple]:
    """The VAE decoder's inputs (shaped like `sample`) for the latents of each calibration trajectory,
    denoised by the PyTorch UNet at `steps`, one image each, as the pipeline decodes them."""
    unet = getattr(pipe.unet, "original", pipe.unet)  # PyTorch's: no graph of another batch is built

    def denoise(x: torch.Tensor, t: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        return unet(x, t, encoder_hidden_states=c, return_dict=False)[0]

    latent = torch.zeros(2, unet.config.in_channels, *sample.shape[2:], dtype=sample.dtype)
    vae, records = pipe.vae, []
    with torch.no_grad():
        for latents in trajectories(pipe, prompts, denoise, latent, steps):
            z = latents / vae.config.scaling_factor + (vae.config.shift_factor or 0.0)
            if vae.post_quant_conv is not None:
                z = vae.post_quant_conv(z)
            records += [(one.numpy().copy(),) for one in z.split(1)]
    return records
