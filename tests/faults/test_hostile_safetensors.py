"""Weights files a user names as a model or a VAE: a .safetensors whose header lies about its length or its
tensors' offsets, a header that is not JSON or nests without end, a file cut short, a pickle renamed
.safetensors. Each is refused with a sentence when the request is checked, before any loader opens it, and
every real weights file still reads."""

from __future__ import annotations

import json

import pytest
from safetensors import safe_open

from pipelines.registry import ASSETS
from pipelines.sources import MAX_CONFIG, read_header
from studio.errors import ValidationError
from studio.request import build_request
from tests.faults import cases, files

SAID = {
    "checkpoint: header length 10^12 in 0.1 kB": "header claims 1,000,000,000,000 bytes, the file holds 87",
    "checkpoint: tensor offsets past the end": "ends at byte 1,073,741,824 of data, past the file's 16",
    "checkpoint: header not JSON": "its header is not UTF-8 text",
    "checkpoint: header nested 100,000 deep": "its header nests deeper than any checkpoint's",
    "checkpoint: cut in half": "past the file's 1,960,734: the file is truncated",
    "checkpoint: torch.save zip renamed": "a PyTorch zip checkpoint (pickle inside) renamed .safetensors",
    "checkpoint: bare pickle renamed": "a pickle renamed .safetensors, and loading a pickle can run code",
    "VAE: .safetensors cut in half": "VAE file",
}


@pytest.mark.parametrize("name", list(cases.CHECKPOINTS))
def test_every_hostile_weights_file_is_refused_with_a_sentence(tmp_path, name):
    outcome = cases.checkpoint_case(cases.Workspace(tmp_path), name)
    assert SAID[name] in outcome.said, outcome.said
    assert "is not a readable .safetensors file" in outcome.said
    assert outcome.said.endswith(("Download or convert it again.", "pass that file."))
    assert outcome.seconds < 2.0 and outcome.runs_lost == 0 and outcome.alive


def test_every_bundled_weights_file_reads_as_safetensors_reads_it():
    """No real file is refused: the header checks agree with safetensors on every file in assets/."""
    weights = sorted(ASSETS.rglob("*.safetensors"))
    assert weights
    for path in weights:
        header = read_header(path)
        with safe_open(str(path), "pt") as real:
            assert sorted(header) == sorted(real.keys()), path
            name = next(iter(header))
            assert list(real.get_slice(name).get_shape()) == header[name]["shape"]


def test_a_header_length_that_starts_like_a_pickle_is_still_read(tmp_path):
    """A header of 640 bytes has a length whose first byte is 0x80, as a pickle's first byte is."""
    entry = {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}
    header = json.dumps({"model.diffusion_model.w": entry}).encode().ljust(640)
    path = files.header_file(tmp_path / "w.safetensors", header, data=bytes(8))
    assert path.read_bytes()[:2] == b"\x80\x02" and read_header(path)["model.diffusion_model.w"] == entry


@pytest.mark.parametrize(
    "config, said",
    [
        ("[" * 50_000 + "]" * 50_000, "it nests too deeply"),
        (
            '{"_class_name": "StableDiffusionPipeline", "x": "' + "a" * MAX_CONFIG + '"}',
            "it is over 1,048,576",
        ),
        ('{"_class_name": ' + "9" * 5000 + "}", "Exceeds the limit (4300 digits)"),
    ],
    ids=["nested", "huge", "long-number"],
)
def test_a_hostile_model_index_is_a_sentence(tmp_path, monkeypatch, config, said):
    monkeypatch.setenv("STUDIO_MODEL_ROOTS", str(tmp_path))
    (tmp_path / "model_index.json").write_text(config)
    with pytest.raises(ValidationError, match="has an unreadable model_index.json") as info:
        build_request(model=str(tmp_path), prompt=files.PROMPT)
    assert said in str(info.value) and str(info.value).endswith("fix or replace the folder.")


def test_a_hostile_vae_config_is_a_sentence(tmp_path, monkeypatch):
    monkeypatch.setenv("STUDIO_MODEL_ROOTS", str(tmp_path))
    (tmp_path / "vae").mkdir()
    (tmp_path / "vae" / "config.json").write_text(json.dumps({"a": "b"})[:-1] + "[" * 50_000)
    with pytest.raises(ValidationError, match="is not a diffusers VAE folder"):
        build_request(model="tiny-shapes", prompt=files.PROMPT, vae=str(tmp_path / "vae"))
