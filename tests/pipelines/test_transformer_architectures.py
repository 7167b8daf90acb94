"""SD3 and Flux from config: the real shapes counted on the meta device, refused before loading where they do
not fit, and the tiny variants through the engine."""

import functools

import pytest
import torch

from pipelines import loader, transformer_architectures
from pipelines.errors import ModelLoadError, ValidationError
from pipelines.registry import FAMILIES, SPECS, resolve
from pipelines.shapes import check_memory
from studio.request import build_request


def _params(name: str) -> dict[str, float]:
    with torch.device("meta"):
        parts = transformer_architectures.models(name)
    return {k: sum(p.numel() for p in m.parameters()) / 1e9 for k, m in parts.items()}


@pytest.mark.parametrize(
    ("name", "denoiser", "billions"),
    [("sd3", "SD3Transformer2DModel", 2.028), ("flux", "FluxTransformer2DModel", 11.90)],
)
def test_the_real_architectures_have_the_published_sizes(name, denoiser, billions):
    spec = SPECS[f"{name}-arch"]
    assert spec.family == name and FAMILIES[spec.pipeline_class] == name
    assert "speed measurement only" in spec.label and "noise" in spec.note
    params = _params(name)
    assert params["transformer"] == pytest.approx(billions, rel=0.005)
    t5 = "text_encoder_3" if name == "sd3" else "text_encoder_2"
    assert params[t5] == pytest.approx(4.76, rel=0.01), "T5-XXL's encoder"
    assert params["vae"] == pytest.approx(0.0838, rel=0.01)


def test_a_model_that_does_not_fit_is_refused_before_anything_is_built(monkeypatch):
    built = []
    monkeypatch.setattr(transformer_architectures, "build", lambda *a, **k: built.append(a))
    monkeypatch.setattr("psutil.virtual_memory", lambda: type("M", (), {"available": 16 * 2**30})())
    with pytest.raises(ModelLoadError, match=r"16\.87 billion parameters x 2 bytes \(bfloat16\) = 31\.4 GiB"):
        loader.load(resolve("flux-arch"), dtype=torch.bfloat16)
    with pytest.raises(ModelLoadError, match=r"x 4 bytes \(float32\).*in bf16 it would need half"):
        check_memory(resolve("sd3-arch"), torch.float32, available=20 * 2**30)
    check_memory(resolve("sd3-arch"), torch.bfloat16, available=20 * 2**30)
    assert not built


@pytest.mark.parametrize("model", ["flux-tiny", "sd3-tiny"])
def test_the_tiny_variants_run_through_the_engine(studio, model):
    req = build_request(model=model, prompt="a red circle", steps=2, optimizations=["bf16"])
    result = studio.generate(req)
    pipe = studio.manager.loaded_pipeline(req)
    assert pipe.transformer.dtype == torch.bfloat16 and pipe.vae.config.latent_channels == 16
    assert result.images[0].size == (64, 64) and result.applied == ("bf16",)
    assert result.metrics["latency_s"] < 30


def test_the_flow_matching_models_refuse_a_discrete_time_scheduler():
    with pytest.raises(ValidationError, match="flux-tiny runs with its own flow-matching scheduler"):
        build_request(model="flux-tiny", prompt="a red circle", scheduler="euler")


@pytest.mark.parametrize(("free_gib", "where"), [(80, "cuda"), (40, "cuda"), (38, "cpu")])
def test_random_weights_are_drawn_on_a_gpu_only_with_room_to_spare(monkeypatch, free_gib, where):
    """Flux's 16.87 billion bf16 parameters (31.4 GiB) are drawn on the GPU when its free memory holds them
    with a quarter to spare, 39.3 GiB (on a 16-core CPU they took over 6 minutes); never without one."""
    from pipelines.random_weights import init_device

    flux = functools.partial(transformer_architectures.models, "flux")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda *a: (free_gib * 2**30, 141 * 2**30))
    assert init_device(flux, torch.bfloat16) == where
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert init_device(flux, torch.bfloat16) == "cpu"


def test_the_denoiser_calls_of_flow_matching_with_a_dynamic_shift_are_counted_without_the_pipeline():
    """Flux's scheduler wants the pipeline's `mu` to set its timesteps; counted outside it, one call a step,
    as the real pipeline makes them (what the GPU benchmark's compute limit multiplies by)."""
    from pipelines.schedulers import denoiser_calls, steps_refused

    pipe = transformer_architectures.build("flux-tiny", SPECS["tiny-shapes"].source)
    calls = []
    handle = pipe.transformer.register_forward_pre_hook(lambda *_: calls.append(1))
    try:
        pipe("a red circle", num_inference_steps=3, height=64, width=64, output_type="latent")
    finally:
        handle.remove()
    assert len(calls) == denoiser_calls(pipe.scheduler, 3) == 3
    assert steps_refused(pipe.scheduler, 3) is None
