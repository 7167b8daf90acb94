"""The compute limit's FLOP count: counted on the meta device, it must agree with what the pipeline's real
call counts, or the share of the peak a CPU figure reads as is wrong."""

import pytest

from benchmarks.cpu_limit import image_flops


def test_the_unet_count_matches_the_one_the_gpu_run_made_on_the_pipelines_own_call():
    # The H100 run counted 1,597.6 GFLOP for one sd15-arch UNet call at 512x512 with guidance, through the
    # pipeline (the prompt then at 24 tokens): the meta-device count of the same call must agree.
    flops = image_flops("sd15", 512, 1, 24)
    assert flops["UNet"] / 1e9 == pytest.approx(1597.6, abs=0.1)


def test_an_image_is_the_steps_unet_calls_plus_one_decode_and_the_text_encoders():
    one, ten = image_flops("sd15", 256, 1, 77), image_flops("sd15", 256, 10, 77)
    assert ten["UNet"] == pytest.approx(10 * one["UNet"])
    assert ten["VAE decoder"] == one["VAE decoder"] and ten["text encoders"] == one["text encoders"]
    # at 256x256 the decoder is no rounding error: ~15% of an image's arithmetic at 10 steps
    assert 0.10 < ten["VAE decoder"] / sum(ten.values()) < 0.20
    xl = image_flops("sdxl", 256, 1, 77)
    assert xl["text encoders"] > 5 * one["text encoders"], "SDXL's two text encoders, CLIP-G among them"
