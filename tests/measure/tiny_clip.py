"""A CLIP model small enough for a test: random weights in CLIP's layout, the bundled model's CLIP tokenizer
and a 32-pixel image processor, saved as a folder the studio loads exactly as it loads a real one."""

from __future__ import annotations

from pathlib import Path

import torch

from pipelines.registry import ASSETS


def build(folder: Path, seed: int = 0) -> Path:
    """Save a tiny CLIP model (weights drawn with `seed`), its tokenizer and image processor in `folder`."""
    from transformers import CLIPConfig, CLIPImageProcessorPil, CLIPModel, CLIPTokenizer

    tokenizer = CLIPTokenizer.from_pretrained(ASSETS / "tiny-shapes" / "tokenizer")
    layers = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2}
    text = {
        **layers,
        "vocab_size": len(tokenizer),
        "max_position_embeddings": tokenizer.model_max_length,
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
    }
    config = CLIPConfig(
        text_config=text, vision_config={**layers, "image_size": 32, "patch_size": 8}, projection_dim=16
    )
    torch.manual_seed(seed)
    CLIPModel(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    CLIPImageProcessorPil(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}).save_pretrained(
        folder
    )
    return folder
