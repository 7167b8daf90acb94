"""PNGs a user drops on "Load from image" (or sends to `/read_image`, or `python -m studio show`): a
decompression bomb, a truncated file, one that is not an image, text chunks that are huge, inflate without
end or nest without end, settings outside what a request may ask. Each gets a sentence within 2 s, without a
pixel decoded, and the run log loses nothing."""

from __future__ import annotations

import zlib

import pytest
from PIL import Image, ImageFile

from studio.errors import ValidationError
from studio.report import image_metadata
from studio.request import build_request
from tests.faults import cases, files

SAID = {
    "PNG: decompression bomb (40,000² px, 0.2 MB)": "Settings of run 7 (baseline), saved by the studio.",
    "PNG: truncated inside its pixels": "This PNG is truncated",
    "PNG: a text file named .png": "This file is not a PNG",
    "PNG: 5 MB text chunk": "The image's parameters text is 5,250,030 bytes; the limit is 65,536.",
    "PNG: text chunk inflating to 50 MB": "The image's parameters text inflates past 65,536 bytes.",
    "PNG: studio JSON nested 30,000 deep": "nests 30,000 levels deep; the limit is 8.",
    "PNG: settings outside a request": "Refused as a request: Local model file '/etc/passwd.safetensors'",
    "PNG: A1111 text, bad escape, 5,000 digits": "the prompt and steps, scheduler",
}


@pytest.fixture
def workspace(tmp_path):
    return cases.Workspace(tmp_path)


@pytest.fixture
def no_decoding(monkeypatch):
    """Any attempt to decode pixels fails the test."""

    def refuse(*args, **kwargs):
        raise AssertionError("the pixels were decoded")

    monkeypatch.setattr(ImageFile.ImageFile, "load", refuse)
    monkeypatch.setattr(Image.Image, "load", refuse)


@pytest.mark.parametrize("name", list(cases.PNGS))
def test_every_hostile_png_gets_a_sentence_within_two_seconds(workspace, no_decoding, name):
    outcome = cases.png_case(workspace, name)
    assert SAID[name] in outcome.said, outcome.said
    assert not outcome.said.startswith(cases.CRASH) and outcome.said.endswith(".")
    assert outcome.seconds < 2.0
    assert outcome.runs_lost == 0 and outcome.alive


def test_the_bomb_is_one_pillow_refuses_and_its_settings_load_anyway(tmp_path):
    bomb = files.bomb_png(tmp_path)
    assert bomb.stat().st_size < 400_000
    with pytest.raises(Image.DecompressionBombError):
        Image.open(bomb)
    found = image_metadata.read(bomb)
    assert found.source == image_metadata.JSON_CHUNK and found.settings["steps"] == 2


def test_settings_outside_a_request_are_refused_by_the_requests_own_checks(tmp_path):
    """What an image claims passes through `build_request` like a typed request: each value outside it is
    refused with the sentence a typed one gets."""
    meta = image_metadata.read(files.outside_png(tmp_path)).settings
    assert meta["model"] == "/etc/passwd.safetensors" and meta["steps"] == 10**9, "read returns the claims"
    fields = image_metadata.fields_from_settings(meta, "tiny-shapes")
    refusals = {
        "model": "outside the allowed roots",
        "vae": r"VAE '/root/vae.ckpt' is a pickle checkpoint",
        "steps": "steps must be a whole number between 1 and 200",
        "width": "width",
    }
    sane = {**fields, "model": "tiny-shapes", "vae": None, "steps": 2, "width": 64}
    for field, sentence in refusals.items():
        with pytest.raises(ValidationError, match=sentence):
            build_request(**{**sane, field: fields[field]})
    assert build_request(**sane).steps == 2


def test_another_tools_parameters_read_as_a_request(tmp_path):
    """Another tool's text names no model: the form's model stands in, and its values are checked."""
    path = files.png(
        tmp_path / "a1111.png", files.text("parameters", "a cat\nSteps: 3, Seed: 5, Size: 64x64")
    )
    fields = image_metadata.fields_from_settings(image_metadata.read(path).settings, "tiny-shapes")
    request = build_request(**fields)
    assert (request.model, request.steps, request.seed, request.width) == ("tiny-shapes", 3, 5, 64)


def test_text_pillow_writes_compressed_in_unicode_or_after_the_pixels_is_read(tmp_path):
    """The reader walks chunks itself: iTXt (a prompt outside Latin-1), zTXt and text after the pixel data
    read as Pillow's own reader reads them."""
    from PIL import PngImagePlugin

    info = PngImagePlugin.PngInfo()
    info.add_itxt("parameters", "un chat 猫\nSteps: 3, Seed: 5", zip=True)
    Image.new("RGB", (8, 8)).save(tmp_path / "itxt.png", pnginfo=info)
    assert image_metadata.read(tmp_path / "itxt.png").settings == {
        "prompt": "un chat 猫",
        "steps": 3,
        "seed": 5,
    }
    after = tmp_path / "after.png"
    whole = files.png(after).read_bytes()
    end = whole.rindex(b"IEND") - 4
    after.write_bytes(
        whole[:end] + files.text("parameters", "a dog\nSteps: 4, Seed: 1", b"zTXt") + whole[end:]
    )
    assert image_metadata.read(after).settings == {"prompt": "a dog", "steps": 4, "seed": 1}


def test_a_damaged_text_chunk_is_a_sentence(tmp_path):
    good = files.text("parameters", "a cat\nSteps: 3, Seed: 5")
    bad_crc = good[:-4] + bytes(4)
    found = image_metadata.read(files.png(tmp_path / "crc.png", bad_crc))
    assert found.settings is None and "damaged (its checksum does not match)" in found.message
    broken = files.chunk(b"zTXt", b"parameters\0\0" + zlib.compress(b"a cat")[:2] + b"\xff" * 12)
    found = image_metadata.read(files.png(tmp_path / "zlib.png", broken))
    assert found.settings is None and "damaged (it does not decompress)" in found.message


def test_describe_survives_figures_of_the_wrong_kind(tmp_path):
    meta = files.studio_json(latency_s="fast", hardware=["cpu"], versions=5, speedup=1.5)
    found = image_metadata.read(files.png(tmp_path / "odd.png", files.text("diffusion-studio", meta)))
    text = image_metadata.describe(found)
    assert "speedup x1.50" in text and "latency" not in text
