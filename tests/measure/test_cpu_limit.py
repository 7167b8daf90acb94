"""The compute limit's FLOP count: counted on the meta device, it must agree with what the pipeline's real
call counts, or the share of the peak a CPU figure reads as is wrong."""

import dataclasses
import shutil

import pytest

from benchmarks.cpu_limit import image_flops


def test_the_unet_count_matches_the_one_the_gpu_run_made_on_the_pipelines_own_call():
    # The H100 run counted 1,597.6 GFLOP for one sd15-arch UNet call at 512x512 with guidance, through the
    # pipeline (the prompt then at 24 tokens): the meta-device count of the same call must agree.
    flops = image_flops("sd15", 512, 1, 24)
    assert flops["UNet"] / 1e9 == pytest.approx(1597.6, abs=0.1)


def test_an_image_is_every_unet_call_its_scheduler_makes_plus_one_decode_and_the_text_encoders():
    one, ten = image_flops("sd15", 256, 1, 77), image_flops("sd15", 256, 10, 77)
    # sd15's PNDM calls the UNet 11 times for 10 steps (once for 1): counting 10 made every share 8% short
    assert ten["UNet"] == pytest.approx(11 * one["UNet"])
    assert ten["VAE decoder"] == one["VAE decoder"] and ten["text encoders"] == one["text encoders"]
    # at 256x256 the decoder is no rounding error: ~15% of an image's arithmetic at 10 steps
    assert 0.10 < ten["VAE decoder"] / sum(ten.values()) < 0.20
    xl, xl_ten = image_flops("sdxl", 256, 1, 77), image_flops("sdxl", 256, 10, 77)
    assert xl["text encoders"] > 5 * one["text encoders"], "SDXL's two text encoders, CLIP-G among them"
    assert xl_ten["UNet"] == pytest.approx(10 * xl["UNet"]), "Euler calls it once a step"


@pytest.mark.parametrize(
    ("flags", "width"), [(["avx2", "fma", "avx512f"], 64), (["avx2", "fma"], 32), (["sse4_2"], 16)]
)
def test_the_fma_ceiling_runs_the_widest_fmas_this_cpu_has(monkeypatch, flags, width):
    # an AVX-512 CPU measured with 256-bit FMAs would read half its ceiling, and every share of it double
    from benchmarks import fma_ceiling
    from studio import devices

    real = devices.detect()
    monkeypatch.setattr(devices, "detect", lambda: dataclasses.replace(real, cpu_flags=frozenset(flags)))
    assert fma_ceiling.vector_width() == width


def test_without_a_c_compiler_the_fma_ceiling_says_so_instead_of_guessing(monkeypatch):
    from benchmarks import fma_ceiling

    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(RuntimeError, match="no C compiler"):
        fma_ceiling.ceiling(1)
