"""LoRAs a user names that the studio must not load: a file cut short, a LoRA for another model or of other
shapes, a pickle, a path outside the allowed roots, an absurd rank, a hub id while offline. Each is one case
of `benchmarks.faults` (`lora_case`): refused with one sentence before anything loads (the one whose shapes
only the model can judge, when its tensors meet the layers), no logged run lost, and the pipeline as it was:
the next run draws what the run before it drew, bit for bit."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from unittest import mock

import numpy as np
import torch
from safetensors.torch import save_file

from pipelines.sources import ASSETS
from studio.request import build_request
from tests.faults.cases import PROMPT, Outcome, Workspace, answer

NIGHT = ASSETS / "loras" / "night.safetensors"
TO_K = "unet.down_blocks.0.attentions.0.transformer_blocks.0.attn2.to_k"


def _pair(folder: Path, name: str, width: int, rank: int = 4, out: int = 48) -> Path:
    """A one-layer LoRA in diffusers' layout on a cross-attention key projection reading `width` features."""
    path = folder / name
    save_file(
        {f"{TO_K}.lora_A.weight": torch.zeros(rank, width), f"{TO_K}.lora_B.weight": torch.zeros(out, rank)},
        path,
    )
    return path


def cut_in_half(folder: Path) -> str:
    raw = NIGHT.read_bytes()
    (folder / "cut.safetensors").write_bytes(raw[: len(raw) // 2])
    return str(folder / "cut.safetensors")


def outside_the_roots(folder: Path) -> str:
    away = folder.parent / f"{folder.name}-elsewhere"
    away.mkdir(exist_ok=True)
    return str(_pair(away, "away.safetensors", 64))


LORAS: dict[str, Callable[[Path], str]] = {
    "LoRA: .safetensors cut in half": cut_in_half,
    "LoRA: made for SDXL": lambda folder: str(_pair(folder, "sdxl-style.safetensors", 2048)),
    "LoRA: a pickle (.ckpt)": lambda folder: "style.ckpt",
    "LoRA: a pickle (.bin)": lambda folder: "pytorch_lora_weights.bin",
    "LoRA: outside the allowed roots": outside_the_roots,
    "LoRA: rank 4096": lambda folder: str(_pair(folder, "huge-rank.safetensors", 64, rank=4096, out=4)),
    "LoRA: hub id, offline": lambda folder: "someone/pixel-art-lora",
    "LoRA: other shapes than the model's": lambda folder: str(_pair(folder, "shapes.safetensors", 96)),
}


def lora_case(ws: Workspace, name: str) -> Outcome:
    """A hostile LoRA named in a request on the bundled model, between two runs without it."""
    source = LORAS[name](ws.root)
    studio = ws.studio("loras.db")
    before = studio.generate(build_request(model="tiny-shapes", prompt=PROMPT, steps=2)).arrays
    env = {"STUDIO_MODEL_ROOTS": str(ws.root), "HF_HUB_OFFLINE": "1"}
    with mock.patch.dict(os.environ, env), mock.patch("huggingface_hub.constants.HF_HUB_OFFLINE", True):

        def run() -> str:
            request = build_request(model="tiny-shapes", prompt=PROMPT, steps=2, loras=[source])
            return f"accepted: {[a.label for a in studio.generate(request).request.loras]}"

        said, seconds = answer(run)
    after = studio.generate(build_request(model="tiny-shapes", prompt=PROMPT, steps=2)).arrays
    same = bool(np.array_equal(before, after))
    return Outcome(name, said, seconds, ws.ledger_lost(), same, {"source": source})
