"""LoRAs a user names that the studio must not load (tests/faults/loras.py): each is refused with one
sentence that says what to do, no logged run is lost, and the run after draws what the run before drew."""

from __future__ import annotations

import pytest

from tests.faults import cases
from tests.faults.loras import LORAS, lora_case

SAID = {
    "LoRA: .safetensors cut in half": "the file is truncated",
    "LoRA: made for SDXL": "was trained for SDXL; this model is Tiny Shapes",
    "LoRA: a pickle (.ckpt)": "is a pickle checkpoint (.ckpt), and loading a pickle can run code",
    "LoRA: a pickle (.bin)": "is a pickle checkpoint (.bin), and loading a pickle can run code",
    "LoRA: outside the allowed roots": "is outside the allowed roots; add its parent to STUDIO_MODEL_ROOTS",
    "LoRA: rank 4096": "rank",
    "LoRA: hub id, offline": "hf download someone/pixel-art-lora",
    "LoRA: other shapes than the model's": "does not fit this model's layers",
}


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    return cases.Workspace(tmp_path_factory.mktemp("loras"))


@pytest.mark.parametrize("name", list(LORAS))
def test_every_hostile_lora_is_refused_with_a_sentence_and_the_pipeline_stays_as_it_was(workspace, name):
    outcome = lora_case(workspace, name)
    assert SAID[name] in outcome.said and not outcome.said.startswith(cases.CRASH), outcome.said
    assert outcome.runs_lost == 0 and outcome.alive, outcome
