"""The configuration inside the image: the PNGs the engine writes carry their run (the studio's JSON and
A1111's `parameters` text), and both read back as the run log's column names."""

from __future__ import annotations

import json

import pytest
from PIL import Image

from studio.report import image_metadata
from studio.sweeps.compare import run_compare
from tests import tiny

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_a_generated_png_carries_its_run_and_reads_back_as_the_run_log_has_it(studio):
    req = tiny.request(["vae_slicing"], negative_prompt="a blue square", guidance=5.0, steps=3)
    result = studio.generate(req)
    found = image_metadata.read(result.image_path)
    meta, row = found.settings, studio.runlog.get_run(result.run_id)
    assert found.source == "diffusion-studio" and f"run {result.run_id}" in found.message
    for column in ("model", "prompt", "negative_prompt", "seed", "steps", "width", "height", "guidance"):
        assert meta[column] == row[column], column
    assert meta["requested"] == ["vae_slicing"] and meta["config"] == "vae_slicing"
    assert meta["latency_s"] == pytest.approx(row["latency_s"], abs=1e-4)
    assert meta["versions"]["diffusers"] and meta["hardware"]["cpu"]
    text = Image.open(result.image_path).text["parameters"]
    assert text.startswith(f"{req.prompt}\nNegative prompt: a blue square\nSteps: 3, ")
    assert f"Run: {result.run_id}" in text and "Optimizations: vae_slicing" in text


def test_a_compared_png_carries_its_speedup(studio):
    result = run_compare(studio, tiny.request(steps=2), ["vae_slicing"], warmup=0, rounds=2)
    meta = image_metadata.read(result.results[1].image_path).settings
    assert meta["speedup"] == result.records[1]["speedup"] is not None
    assert meta["group_id"] == result.group_id


def test_the_image_gradio_serves_keeps_the_text(studio):
    """The PIL image handed to the UI carries the chunks too: Gradio copies an image's text into its PNG."""
    image = studio.generate(tiny.request(steps=2)).images[0]
    assert json.loads(image.info["diffusion-studio"])["steps"] == 2


def test_a1111_parameters_are_read_as_run_log_columns():
    text = (
        'a cat, "best" quality\nwith a hat\nNegative prompt: blurry, lowres\n'
        "Steps: 30, Sampler: Euler a, Schedule type: Karras, CFG scale: 7, Seed: 1234, Size: 512x768, "
        'Model hash: 6ce0161689, Model: dreamshaper_8, Lora hashes: "add_detail: 7c6bad76eb54, x: 1", '
        "Version: v1.10.0"
    )
    assert image_metadata.parse_parameters(text) == {
        "prompt": 'a cat, "best" quality\nwith a hat',
        "negative_prompt": "blurry, lowres",
        "steps": 30,
        "guidance": 7.0,
        "seed": 1234,
        "width": 512,
        "height": 768,
        "scheduler": "euler_a",
        "other_tool_model": "dreamshaper_8",
    }


def test_the_studios_parameters_text_reads_back():
    meta = {
        "prompt": "a small star",
        "negative_prompt": "",
        "steps": 8,
        "guidance": 4.5,
        "seed": 7,
        "width": 64,
        "height": 96,
        "scheduler": "dpmpp_2m",
        "config": "openvino[mode=hybrid_int8,vae=true]+cfg_cutoff[after=0.5]",
        "latency_s": 0.25,
    }
    text = image_metadata.parameters_text(meta)
    assert 'Optimizations: "openvino[mode=hybrid_int8,vae=true]+cfg_cutoff[after=0.5]"' in text
    back = image_metadata.parse_parameters(text)
    assert {k: back[k] for k in ("prompt", "steps", "guidance", "seed", "width", "height", "scheduler")} == {
        k: meta[k] for k in ("prompt", "steps", "guidance", "seed", "width", "height", "scheduler")
    }


def test_a_value_another_tool_writes_that_the_studio_cannot_use_is_left_out():
    meta = image_metadata.parse_parameters("a dog\nSteps: 20, Seed: 12.5, Size: big, Sampler: Heun")
    assert meta == {"prompt": "a dog", "steps": 20}


def test_images_without_settings_get_a_sentence(tmp_path):
    plain, text = tmp_path / "plain.png", tmp_path / "notes.png"
    Image.new("RGB", (8, 8)).save(plain)
    (tmp_path / "notes.png").write_text("not an image")
    found = image_metadata.read(plain)
    assert found.settings is None and found.message == image_metadata.NO_METADATA
    broken = image_metadata.read(text)
    assert broken.settings is None and broken.message == image_metadata.NOT_PNG


def test_a_generated_pngs_settings_check_back_into_the_same_request(studio):
    """`fields_from_settings` gives `build_request` what the image carries: the same request comes back,
    weights precision and technique settings included."""
    from studio.request import build_request

    req = tiny.request(["bf16", "vae_slicing"], negative_prompt="blurry", guidance=5.0, steps=2, seed=11)
    found = image_metadata.read(studio.generate(req).image_path)
    again = build_request(**image_metadata.fields_from_settings(found.settings, "another-model"))
    assert again == req
