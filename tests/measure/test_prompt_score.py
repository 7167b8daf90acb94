"""The prompt score: does an image still say its prompt. A CLIP score from the model the setting names (here a
tiny one saved in the test's folder, loaded like a real one), the model's own judge where it has one, and a
sentence where no CLIP model can be loaded. Random weights cannot tell a matching prompt from another, so
these tests hold what they can: range, determinism, the definition, one load per process, the change against
the baseline, and why a score is missing."""

from __future__ import annotations

import logging
import shutil
import uuid

import numpy as np
import pytest
import torch
from PIL import Image

from pipelines.registry import ASSETS
from studio import settings
from studio.measure import prompt_score
from tests.measure import tiny_clip

PROMPT = "a big red circle on the left, on a white background"


@pytest.fixture(scope="module")
def saved_clip(tmp_path_factory):
    return tiny_clip.build(tmp_path_factory.mktemp("clip"))


@pytest.fixture
def clip_folder(saved_clip, tmp_path, monkeypatch):
    """A copy of the tiny CLIP under a path no earlier test loaded, named by the setting."""
    folder = shutil.copytree(saved_clip, tmp_path / "clip")
    monkeypatch.setenv("STUDIO_CLIP_MODEL", str(folder))
    return folder


@pytest.fixture
def loads(monkeypatch):
    """How many times a CLIP model is read from disk."""
    from transformers import CLIPModel

    read = CLIPModel.from_pretrained.__func__
    calls = []

    def counted(cls, *args, **kwargs):
        calls.append(args[0])
        return read(cls, *args, **kwargs)

    monkeypatch.setattr(CLIPModel, "from_pretrained", classmethod(counted))
    return calls


def image(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).random((64, 64, 3)).astype(np.float32)


def test_a_clip_score_is_in_range_repeatable_and_its_model_read_once(clip_folder, loads):
    first = prompt_score.fields(image(0), PROMPT, None, None)
    again = prompt_score.fields(image(0), PROMPT, None, None)
    other = prompt_score.fields(image(1), PROMPT, None, None)
    assert 0 <= first["prompt_score"] <= 100 and first == again, "same image and prompt, same score"
    assert first["prompt_score"] != other["prompt_score"], "another image, another score"
    assert first["prompt_score_by"] == f"clip:{clip_folder}" and first["prompt_score_note"] is None
    assert first["prompt_score_change"] is None, "no baseline, no change"
    assert loads == [str(clip_folder)], "the model is read once per process, not per image"
    long = prompt_score.fields(image(0), PROMPT * 6, None, None)["prompt_score"]
    assert 0 <= long <= 100, "a prompt longer than the text encoder reads is cut, as the pipeline cuts it"


def test_the_score_is_torchmetrics_clip_score(clip_folder):
    """100 x the cosine of the projected image and text embeddings, floored at 0 (torchmetrics' CLIPScore)."""
    clip = prompt_score.clip(str(clip_folder))
    pil = Image.fromarray((image(2) * 255).round().astype(np.uint8))
    inputs = clip.processor(text=[PROMPT], images=[pil], return_tensors="pt", truncation=True)
    with torch.no_grad():
        vision = clip.model.vision_model(pixel_values=inputs["pixel_values"]).pooler_output
        text = clip.model.text_model(input_ids=inputs["input_ids"]).pooler_output
        img, txt = clip.model.visual_projection(vision), clip.model.text_projection(text)
    cosine = float((img / img.norm() * (txt / txt.norm())).sum())
    assert prompt_score.fields(image(2), PROMPT, None, None)["prompt_score"] == pytest.approx(
        max(100 * cosine, 0.0), abs=1e-4
    )


def test_the_change_is_against_the_baselines_score_by_the_same_scorer(clip_folder):
    base = prompt_score.fields(image(0), PROMPT, None, None)
    run = prompt_score.fields(image(1), PROMPT, None, base)
    assert run["prompt_score_change"] == pytest.approx(run["prompt_score"] - base["prompt_score"])
    judged = {**base, "prompt_score_by": prompt_score.JUDGE}
    assert prompt_score.fields(image(1), PROMPT, None, judged)["prompt_score_change"] is None, (
        "scores of two scorers do not compare"
    )


def test_the_models_own_judge_stands_for_clip_where_it_reads_the_prompt(clip_folder, loads):
    base = prompt_score.fields(image(0), PROMPT, {"score": 1.0}, None)
    run = prompt_score.fields(image(1), PROMPT, {"score": 2 / 3}, base)
    assert (run["prompt_score"], run["prompt_score_by"]) == (
        pytest.approx(66.667, abs=1e-3),
        "fidelity judge",
    )
    assert run["prompt_score_change"] == pytest.approx(-33.333, abs=1e-3) and loads == []
    unread = prompt_score.fields(image(1), "a cat", {"score": None}, None)
    assert unread["prompt_score_by"] == f"clip:{clip_folder}", (
        "a prompt the judge cannot read: CLIP scores it"
    )


def test_a_model_not_in_the_local_cache_is_a_sentence_said_once_and_not_tried_again(
    clip_folder, monkeypatch, caplog
):
    from transformers import AutoConfig

    missing = f"studio-tests/missing-{uuid.uuid4().hex[:8]}"  # an id this process has not tried yet
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("STUDIO_CLIP_MODEL", missing)
    read = AutoConfig.from_pretrained.__func__
    tries = []
    monkeypatch.setattr(
        AutoConfig,
        "from_pretrained",
        classmethod(lambda cls, *a, **k: tries.append(a[0]) or read(cls, *a, **k)),
    )
    with caplog.at_level(logging.WARNING, logger=prompt_score.__name__):
        runs = [prompt_score.fields(image(i), PROMPT, None, None) for i in range(3)]
    assert runs[0] == runs[2] and (runs[0]["prompt_score"], runs[0]["prompt_score_by"]) == (None, None)
    assert runs[0]["prompt_score_note"] == (
        f"no CLIP model: {missing} is not in the local Hugging Face cache, and runs never download it: fetch "
        f"it once with `hf download {missing}`, or set STUDIO_CLIP_MODEL to a local folder"
    )
    assert tries == [missing], "tried once per process, not on every image"
    said = [r.getMessage() for r in caplog.records if missing in r.getMessage()]
    assert said == [f"{runs[0]['prompt_score_note']}; runs are logged without a prompt score"], "said once"
    monkeypatch.setenv("STUDIO_CLIP_MODEL", str(clip_folder))
    assert prompt_score.fields(image(0), PROMPT, None, None)["prompt_score"] is not None, (
        "a changed setting is tried"
    )


@pytest.mark.parametrize(
    "model_id, sentence",
    [
        ("bad id!!", "no CLIP model: 'bad id!!' is neither a local folder nor a Hugging Face model id"),
        ("/no/such/folder", "no CLIP model: there is no folder /no/such/folder (STUDIO_CLIP_MODEL)"),
        (str(ASSETS / "tiny-shapes" / "text_encoder"), "holds a clip_text_model model, not a CLIP model"),
        (str(ASSETS / "tiny-shapes"), "could not be loaded (Unrecognized model in"),
        ("off", "no CLIP model: STUDIO_CLIP_MODEL is off"),
    ],
    ids=["bad-id", "no-folder", "text-encoder-only", "not-a-model-folder", "off"],
)
def test_a_model_that_cannot_be_loaded_leaves_the_reason(model_id, sentence, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("STUDIO_CLIP_MODEL", model_id)
    scored = prompt_score.fields(image(0), PROMPT, None, None)
    assert scored["prompt_score"] is None and sentence in scored["prompt_score_note"]


def test_a_damaged_model_file_is_a_sentence(saved_clip, tmp_path, monkeypatch):
    folder = shutil.copytree(saved_clip, tmp_path / "damaged")
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:500])
    monkeypatch.setenv("STUDIO_CLIP_MODEL", str(folder))
    note = prompt_score.fields(image(0), PROMPT, None, None)["prompt_score_note"]
    assert note.startswith(f"no CLIP model: {folder} could not be loaded (")


def test_a_model_without_its_image_processor_is_a_sentence_not_a_failed_run(
    saved_clip, tmp_path, monkeypatch
):
    folder = shutil.copytree(saved_clip, tmp_path / "no-processor")
    (folder / "preprocessor_config.json").unlink()
    monkeypatch.setenv("STUDIO_CLIP_MODEL", str(folder))
    scored = prompt_score.fields(image(0), PROMPT, None, None)
    assert scored["prompt_score"] is None and scored["prompt_score_note"].startswith(
        f"no CLIP model: {folder} could not be loaded ("
    )


def test_the_setting_defaults_to_clip_vit_b32_and_can_be_turned_off(monkeypatch):
    monkeypatch.delenv("STUDIO_CLIP_MODEL", raising=False)
    assert settings.clip_model() == "openai/clip-vit-base-patch32"
    for off in ("off", "0", "None"):
        monkeypatch.setenv("STUDIO_CLIP_MODEL", off)
        assert settings.clip_model() is None
    monkeypatch.setenv("STUDIO_CLIP_MODEL", " /models/clip ")
    assert settings.clip_model() == "/models/clip"
