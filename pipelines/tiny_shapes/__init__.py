"""tiny-shapes: the small text-to-image model bundled with Diffusion Studio.

A Stable-Diffusion-format pipeline (CLIP tokenizer + text encoder, cross-attention UNet,
AutoencoderKL, DPM-Solver++) trained from scratch on procedurally drawn shapes. This package
holds its prompt language, dataset, analyzer, training and evaluation code; the weights live
in ``assets/tiny-shapes``. Importing it is light (no torch); the helpers the engine needs:

- :func:`unknown_words` - words of a prompt the model does not know (to warn in the UI);
- :func:`parse_prompt` - the attributes a prompt asks for;
- :func:`fidelity` - does an image match its prompt (colour, shape, position, size, background).
"""

from __future__ import annotations

from pathlib import Path

from .analyze import analyze, fidelity, parse_prompt
from .language import (
    DEFAULT_GUIDANCE,
    DEFAULT_SIZE,
    DEFAULT_STEPS,
    EXAMPLE_PROMPT,
    language_words,
    unknown_words,
)

ASSET_DIR = Path(__file__).resolve().parents[2] / "assets" / "tiny-shapes"

__all__ = [
    "ASSET_DIR",
    "DEFAULT_GUIDANCE",
    "DEFAULT_SIZE",
    "DEFAULT_STEPS",
    "EXAMPLE_PROMPT",
    "analyze",
    "fidelity",
    "language_words",
    "parse_prompt",
    "unknown_words",
]
