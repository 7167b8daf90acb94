"""LoRAs at request time and the step lever on the bundled model: `night` darkens the background with its
scale and at 0 draws the baseline bit for bit; a run without LoRAs after LoRA runs is the one before, bit for
bit, whatever technique it runs with; fuse_lora draws what the unfused LoRA draws and puts the weights back
exactly; few_step runs the adapter's steps and still draws the prompt; tiny_vae decodes close to the VAE."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from studio.errors import ValidationError
from studio.manager import PipelineManager
from studio.measure import bench
from studio.measure.quality import psnr
from studio.optimizations import adapters
from studio.request import build_request
from tests.tiny import fidelity, request

PROMPTS = (
    "a big red circle on the left, on a white background",
    "a small blue square at the top, on a grey background",
    "a big yellow star in the centre, on a white background",
)


@pytest.fixture(scope="module")
def manager():
    return PipelineManager()


def draw(
    manager: PipelineManager, optimizations=(), steps: int = 8, prompt: str = PROMPTS[0], **kw
) -> np.ndarray:
    req = request(optimizations, steps=steps, prompt=prompt, **kw)
    with manager.acquire(req) as prepared:
        return bench.run_once(prepared, req).images


def background(images: np.ndarray) -> float:
    """Mean brightness (0-1) of the image's border pixels: where the bundled model draws its background."""
    image = images[0]
    border = np.concatenate([image[:4].reshape(-1, 3), image[-4:].reshape(-1, 3)])
    return float(border.mean())


def test_night_darkens_the_background_with_its_scale_and_at_zero_is_the_baseline(manager):
    plain = draw(manager)
    at = {scale: draw(manager, loras=[f"night:{scale}"]) for scale in (0, 0.5, 1)}
    assert np.array_equal(at[0], plain), "night at scale 0 must draw the baseline bit for bit"
    assert background(plain) > 0.8, "the prompt asks for a white background"
    assert background(at[1]) < 0.25, "at scale 1 the background is dark"
    assert background(at[1]) < background(at[0.5]) < background(plain) - 0.05, "it darkens as the scale grows"
    assert fidelity(at[1])["detected"]["shape"] == "circle", "the shape stays"


@pytest.mark.parametrize("optimizations", [(), ("channels_last",), ("sdpa", "vae_slicing"), ("fuse_lora",)])
def test_a_run_without_loras_after_lora_runs_is_the_one_before_bit_for_bit(manager, optimizations):
    before = draw(manager, optimizations)
    draw(manager, optimizations, loras=["night:1"])
    draw(manager, optimizations, loras=["night:0.5", "tiny-shapes-lcm:0.3"])
    assert np.array_equal(draw(manager, optimizations), before)


def test_fuse_lora_draws_the_unfused_lora_and_restores_the_weights_exactly(manager):
    draw(manager)  # no LoRA on the pipeline: its weights as loaded
    loaded = {k: v.clone() for k, v in manager.loaded_pipeline(request()).unet.state_dict().items()}
    unfused = draw(manager, loras=["night:0.7"])
    fused = draw(manager, ("fuse_lora",), loras=["night:0.7"])
    assert psnr(fused, unfused) >= 40.0
    assert np.array_equal(draw(manager, loras=["night:0.7"]), unfused), "fuse_lora reverted: unfused again"
    assert np.array_equal(draw(manager, ("fuse_lora",), loras=["night:0.7"]), fused)
    draw(manager)
    after = manager.loaded_pipeline(request()).unet.state_dict()
    assert after.keys() == loaded.keys()
    assert all(torch.equal(after[k], v) for k, v in loaded.items()), "the weights as loaded, exactly"


def test_a_lora_switch_reads_its_file_once_then_keeps_it_ready(manager):
    """The first use reads the file (or takes the tensors kept in RAM); a LoRA switched off and on again is
    still loaded on the pipeline, and turning it on costs milliseconds."""
    adapters.CACHE.clear()
    misses = adapters.CACHE.stats().misses
    fresh = PipelineManager()
    draw(fresh, steps=2)
    req = request(steps=2, loras=["night:1"])
    with fresh.acquire(req) as prepared:
        assert prepared.ctx.stats["lora_reads"] == ["disk"]
    draw(fresh, steps=2)
    with fresh.acquire(req) as prepared:
        assert prepared.ctx.stats["lora_reads"] == ["loaded"]
        assert prepared.ctx.stats["lora_switch_seconds"] < 0.1
    with manager.acquire(req) as prepared:  # another pipeline: the tensors come from RAM
        assert prepared.ctx.stats.get("lora_reads") in (["ram"], ["loaded"])
    assert adapters.CACHE.stats().misses == misses + 1, "the file was read once"


def test_few_step_runs_the_adapters_steps_and_draws_the_prompt():
    """few_step runs the adapter's 4 steps without guidance, and over a dozen of docs/tiny-shapes.md's prompts
    the judge finds what the 20-step baseline draws (docs/benchmarks.md has the whole set)."""
    from pipelines.tiny_shapes.evaluate import eval_prompts, score

    req = request(["few_step"], steps=20)
    assert (req.steps, req.guidance, req.scheduler) == (4, 1.0, "lcm_10")
    assert [a.label for a in req.loras] == ["tiny-shapes-lcm:0.25"]
    assert request(["few_step"], settings={"few_step": {"steps": 6}}).steps == 6
    manager, prompts = PipelineManager(), eval_prompts()[:12]
    judged = {}
    for optimizations in ((), ("few_step",)):
        images = [draw(manager, optimizations, steps=20, prompt=prompt)[0] for prompt in prompts]
        judged[optimizations] = score(
            [Image.fromarray((i.clip(0, 1) * 255).round().astype(np.uint8)) for i in images], prompts
        )
    few, base = judged[("few_step",)], judged[()]
    assert all(few[key] >= base[key] - 0.1 for key in ("shape", "colour", "position")), (few, base)


def test_tiny_vae_decodes_close_to_the_vae_then_reverts(manager):
    full = draw(manager, steps=8)
    tiny = draw(manager, ("tiny_vae",), steps=8)
    assert 20.0 <= psnr(tiny, full) < 100.0, "close to the VAE's image, and not the VAE itself"
    assert fidelity(tiny)["detected"] == fidelity(full)["detected"]
    assert np.array_equal(draw(manager, steps=8), full), "reverting tiny_vae gives back the VAE's image"


@pytest.mark.parametrize("model", ["flux-tiny", "sd3-tiny"])
def test_the_step_lever_is_refused_where_no_part_is_registered(model):
    """A tiny transformer's shapes are its own: no distilled adapter or tiny decoder fits it, and a request
    for one is refused with a sentence before anything loads."""
    with pytest.raises(ValidationError, match=f"few_step has no distilled adapter registered for {model}"):
        build_request(model=model, prompt="a red circle", optimizations=["few_step"])
    with pytest.raises(ValidationError, match=f"tiny_vae has no tiny decoder registered for {model}"):
        build_request(model=model, prompt="a red circle", optimizations=["tiny_vae"])


def test_under_torch_compile_a_lora_strength_sweep_compiles_once_and_switches_in_place():
    """The X axis users run (`lora`: night:0, 0.5, 1, then none): under torch_compile the scales are set in
    place, so the graph count stays what the first value built and each switch takes well under a second,
    and each scale draws what the uncompiled pipeline draws at that scale."""
    from studio.recompiles import graph_builds
    from studio.request.axes import at, parse_axis

    base = request(["torch_compile"], steps=4)
    axis = parse_axis("lora", "night:0,night:0.5,night:1,none", base)
    compiled, eager = PipelineManager(), PipelineManager()
    builds, drawn = [], {}
    for value in axis.values:
        req = at(base, axis, value)
        with compiled.acquire(req) as prepared:
            drawn[value] = bench.run_once(prepared, req).images
            builds.append(graph_builds(prepared.ctx.stats))
            if value != axis.values[0]:
                assert prepared.ctx.stats["lora_switch_seconds"] < 1.0, value
        plain = at(request(steps=4), axis, value)
        with eager.acquire(plain) as prepared:
            assert psnr(drawn[value], bench.run_once(prepared, plain).images) >= 35.0, value
    assert builds[0] >= 1 and builds[1:3] == [builds[0]] * 2, f"graphs built per value: {builds}"
    assert background(drawn["night:1"]) < background(drawn["night:0.5"]) < background(drawn["night:0"])


def test_under_torch_compile_another_lora_file_says_it_compiles_again_and_why(studio):
    """A change of scale is set in place and says nothing; another LoRA file makes the compiled denoiser build
    a graph again, and the run says so with what to do instead."""
    compiled = ["torch_compile"]
    said = [
        studio.generate(request(compiled, steps=2, loras=loras)).warnings
        for loras in (["night:1"], ["night:0.5"], ["tiny-shapes-lcm:0.25"], [])
    ]
    again = "This run compiled the denoiser again: its LoRA files are not the last run's"
    assert not any(again in w for w in said[0] + said[1]), "the first build and a scale change say nothing"
    assert any(again in w for w in said[2]), said[2]
    assert any(again in w for w in said[3]), "taking the LoRAs off compiles again too"
