"""The tiny-shapes adapters: the night and few-step LoRAs and the tiny decoder, through the real loaders.

Judged on attributes and margins (never exact pixels across machines): CPUs with AVX2, AVX-512 or
AMX give slightly different floats.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pipelines.tiny_shapes import ASSET_DIR, DEFAULT_GUIDANCE, fidelity
from pipelines.tiny_shapes.adapter_training import (
    LORA_DIR,
    background_brightness,
    loaded_lora_modules,
    lora_size,
)
from pipelines.tiny_shapes.dataset import make_specs, render_array
from pipelines.tiny_shapes.runs_io import to_tensor

NIGHT = LORA_DIR / "night.safetensors"
LCM = LORA_DIR / "tiny-shapes-lcm.safetensors"
TINY_VAE = ASSET_DIR.parent / "tiny-shapes-tiny-vae"
NIGHT_PROMPTS = [
    "a big yellow circle on the left, on a white background",
    "a big blue triangle in the centre, on a grey background",
]
LCM_PROMPTS = [
    "a big red circle on the left, on a white background",
    "a big green triangle at the top, on a black background",
    "a big yellow square on the right, on a grey background",
]
TINY_VAE_PSNR_FLOOR = 30.0  # measured 34.9 dB on these 8 scenes (33.9 dB mean on the benchmark's latents)


@pytest.fixture(scope="module")
def pipe():
    """The shipped pipeline through the real loader, offline (adapters are loaded and unloaded per test)."""
    mp = pytest.MonkeyPatch()
    mp.setenv("HF_HUB_OFFLINE", "1")
    from diffusers import StableDiffusionPipeline

    pipeline = StableDiffusionPipeline.from_pretrained(ASSET_DIR, use_safetensors=True)
    pipeline.set_progress_bar_config(disable=True)
    yield pipeline
    mp.undo()


def _images(pipe, prompts, steps=8, guidance=DEFAULT_GUIDANCE, output_type="pil"):
    gen = torch.Generator().manual_seed(0)
    out = pipe(
        prompts, num_inference_steps=steps, guidance_scale=guidance, generator=gen, output_type=output_type
    )
    return out.images


@pytest.mark.parametrize("path", [NIGHT, LCM], ids=["night", "lcm"])
def test_lora_files_are_small_unet_loras_that_load_in_full(pipe, path):
    from safetensors.torch import load_file

    params, rank = lora_size(path)
    assert path.stat().st_size < 2 * 1024 * 1024 and rank <= 16 and params > 0
    in_file = sum(1 for key in load_file(path) if ".lora_A." in key)
    pipe.load_lora_weights(path.parent, weight_name=path.name, adapter_name="probe")
    try:
        assert pipe.get_list_adapters() == {"unet": ["probe"]}
        assert loaded_lora_modules(pipe.unet) == in_file  # every LoRA layer of the file, none dropped
    finally:
        pipe.unload_lora_weights()


def test_night_darkens_the_background_and_keeps_the_shape_colour(pipe):
    plain = _images(pipe, NIGHT_PROMPTS)
    pipe.load_lora_weights(NIGHT.parent, weight_name=NIGHT.name, adapter_name="night")
    try:
        pipe.set_adapters(["night"], adapter_weights=[1.0])
        night = _images(pipe, NIGHT_PROMPTS)
    finally:
        pipe.unload_lora_weights()
    for before, after, prompt in zip(plain, night, NIGHT_PROMPTS, strict=True):
        assert background_brightness(before) > 100
        assert background_brightness(after) < 60  # measured ~30 and ~15 (white, grey: ~245, ~128 without)
        correct = fidelity(after, prompt)["correct"]
        assert correct["shape"] and correct["colour"] and correct["position"], (prompt, correct)


def test_unloading_a_lora_restores_the_exact_outputs(pipe):
    before = _images(pipe, NIGHT_PROMPTS[:1], steps=4, output_type="latent")
    pipe.load_lora_weights(NIGHT.parent, weight_name=NIGHT.name, adapter_name="night")
    pipe.set_adapters(["night"], adapter_weights=[1.0])
    with_lora = _images(pipe, NIGHT_PROMPTS[:1], steps=4, output_type="latent")
    pipe.unload_lora_weights()
    after = _images(pipe, NIGHT_PROMPTS[:1], steps=4, output_type="latent")
    assert not torch.equal(before, with_lora)
    assert torch.equal(before, after)


def test_few_step_lora_draws_the_prompt_in_4_steps_without_guidance(pipe):
    from diffusers import LCMScheduler

    from pipelines.tiny_shapes.train_few_step import ORIGINAL_STEPS

    own = pipe.scheduler
    pipe.load_lora_weights(LCM.parent, weight_name=LCM.name, adapter_name="lcm")
    try:
        pipe.set_adapters(["lcm"], adapter_weights=[1.0])
        pipe.scheduler = LCMScheduler.from_config(own.config, original_inference_steps=ORIGINAL_STEPS)
        images = _images(pipe, LCM_PROMPTS, steps=4, guidance=1.0)
    finally:
        pipe.scheduler = own
        pipe.unload_lora_weights()
    for image, prompt in zip(images, LCM_PROMPTS, strict=True):
        correct = fidelity(image, prompt)["correct"]
        assert correct["shape"] and correct["colour"] and correct["position"], (prompt, correct)


def test_tiny_vae_decodes_real_latents_close_to_the_full_vae(pipe):
    from diffusers import AutoencoderTiny, StableDiffusionPipeline

    tiny = AutoencoderTiny.from_pretrained(TINY_VAE).eval()
    assert (
        tiny.config.latent_channels == pipe.vae.config.latent_channels and tiny.config.scaling_factor == 1.0
    )
    scenes = to_tensor(render_array(make_specs(8, seed=123)))
    with torch.no_grad():
        latents = pipe.vae.encode(scenes).latent_dist.mean * pipe.vae.config.scaling_factor
        full = pipe.vae.decode(latents / pipe.vae.config.scaling_factor).sample
        small = tiny.decode(latents / tiny.config.scaling_factor).sample
    assert small.shape == full.shape == (8, 3, 64, 64)
    as_u8 = [((x / 2 + 0.5).clamp(0, 1) * 255).round().numpy() for x in (full, small)]
    mse = np.mean((as_u8[0] - as_u8[1]) ** 2)
    assert 10 * np.log10(255**2 / mse) > TINY_VAE_PSNR_FLOOR
    swapped = StableDiffusionPipeline(**{**pipe.components, "vae": tiny}, requires_safety_checker=False)
    swapped.set_progress_bar_config(disable=True)
    image = _images(swapped, NIGHT_PROMPTS[:1], steps=8)[0]
    assert image.size == (64, 64) and fidelity(image, NIGHT_PROMPTS[0])["correct"]["colour"]
