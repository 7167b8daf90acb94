"""sd15-arch: the real SD 1.5 shapes from config, random weights, through the same engine."""

import pytest
import torch

from pipelines import architectures, transformer_architectures
from pipelines.registry import SPECS
from studio import devices
from studio.request import build_request


@pytest.mark.slow
def test_sd15_arch_runs_through_the_engine_in_the_cpus_own_precision(studio):
    """bf16 where the CPU computes it (AVX512-BF16 or AMX), fp32 elsewhere: emulated bf16 took 80.8 s for this
    one step on an AVX2-only AMD EPYC, fp32 5.0 s."""
    spec = SPECS["sd15-arch"]
    assert "speed measurement only" in spec.label and "noise" in spec.note
    optimizations = ["bf16"] if devices.detect().cpu_bf16 else []
    req = build_request(
        model="sd15-arch", prompt="a red circle", steps=1, width=64, height=64, optimizations=optimizations
    )
    result = studio.generate(req)
    pipe = studio.manager._entries[next(iter(studio.manager._entries))].base
    assert pipe.unet.config.block_out_channels == (320, 640, 1280, 1280)
    assert pipe.unet.config.cross_attention_dim == 768 and pipe.vae.config.scaling_factor == 0.18215
    assert sum(p.numel() for p in pipe.unet.parameters()) > 800e6, "not the full SD 1.5 UNet"
    assert result.images[0].size == (64, 64) and result.applied == tuple(optimizations)


@pytest.mark.parametrize("model", ["sd15-arch", "sdxl-arch", "flux-tiny"])
def test_a_device_map_on_a_model_built_from_config_is_refused_with_the_way_out(model):
    """These models are built in the process, not read with from_pretrained: a device map would be ignored
    and the run would stay on the CPU, so it is refused (before anything is built) with what to do instead."""
    from pipelines import loader
    from pipelines.errors import ModelLoadError

    with pytest.raises(ModelLoadError, match=r"without a device map; save it as a diffusers folder"):
        loader.load(SPECS[model], device_map="balanced")


def _on_meta(models):
    def build(name):
        with torch.device("meta"):
            return models(name)

    return build


@pytest.mark.parametrize("name", ["sd15", "sdxl", "sd3", "flux"])
def test_the_real_architectures_read_prompts_as_long_as_their_text_encoders(name, monkeypatch):
    """The bundled tokenizer pads to 24 tokens; on the real shapes every CLIP tokenizer must pad to its text
    encoder's 77 positions, or cross-attention (and the speed measured on these models) is that of a shorter
    prompt than the real model reads. The models are made on the meta device: nothing is allocated."""
    for module in (architectures, transformer_architectures):
        monkeypatch.setattr(module, "models", _on_meta(module.models))
    pipe = architectures.build(name, SPECS["tiny-shapes"].source)
    pairs = [("tokenizer", "text_encoder"), ("tokenizer_2", "text_encoder_2")]
    checked = 0
    for tok, enc in pairs:
        tokenizer, encoder = getattr(pipe, tok, None), getattr(pipe, enc, None)
        if tokenizer is None or type(tokenizer).__name__ != "CLIPTokenizer":
            continue
        ids = tokenizer("a photo of an astronaut", padding="max_length").input_ids
        assert len(ids) == encoder.config.max_position_embeddings == 77, (tok, len(ids))
        checked += 1
    assert checked >= 1
