"""Does the image still say its prompt: the CLIP score, or the model's own judge where it reads the prompt.

The CLIP score is torchmetrics' CLIPScore: 100 x the cosine of CLIP's image and text embeddings, floored at 0
(the prompt cut at the text encoder's length). The CLIP model is the `STUDIO_CLIP_MODEL` setting
(`studio.settings.clip_model`), read from a local folder or the local Hugging Face cache only: a run never
downloads it. It is loaded once per process, on the CPU; a model that cannot be loaded is said once (a
warning) and not tried again in this process, and the score is then absent with the reason as a sentence. A
model whose spec has a prompt-fidelity judge (the bundled tiny-shapes) is scored by the judge instead, where
the judge reads the prompt: 100 x the share of the prompt's attributes the image shows.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np
from safetensors import SafetensorError

from studio import settings

log = logging.getLogger(__name__)

JUDGE = "fidelity judge"
FIELDS = ("prompt_score", "prompt_score_by", "prompt_score_change", "prompt_score_note")
# What transformers raises on a model it cannot read: missing or refused files (OSError), a config of another
# kind (ValueError), weights of other shapes (RuntimeError), a damaged safetensors file.
LOAD_ERRORS = (OSError, ValueError, RuntimeError, SafetensorError)


@dataclass(frozen=True)
class Clip:
    """A loaded CLIP model, its processor (tokenizer and image processor) and the tokens its text encoder
    reads."""

    model_id: str
    model: Any
    processor: Any
    max_tokens: int


_lock = threading.Lock()
_cache: dict[str, Clip | str] = {}  # model id -> the loaded model (one at a time), or why it cannot be loaded


def _load(model_id: str) -> Clip:
    """Read a CLIP model, its tokenizer and image processor from a local folder or the local Hugging Face
    cache, in float32 on the CPU; a ValueError when the files are no CLIP model."""
    import torch
    from transformers import AutoConfig, AutoProcessor, CLIPModel

    config = AutoConfig.from_pretrained(model_id, local_files_only=True)
    if config.model_type != "clip":
        raise ValueError(
            f"it holds a {config.model_type} model, not a CLIP model with image and text encoders"
        )
    model, info = CLIPModel.from_pretrained(
        model_id, config=config, dtype=torch.float32, local_files_only=True, output_loading_info=True
    )
    if info["missing_keys"]:
        missing = len(info["missing_keys"])
        raise ValueError(
            f"its weights lack {missing} of the model's tensors ({info['missing_keys'][0]}, ...)"
        )
    processor = AutoProcessor.from_pretrained(model_id, local_files_only=True)
    if not (hasattr(processor, "tokenizer") and hasattr(processor, "image_processor")):
        raise ValueError("it has no tokenizer and image processor beside the model")
    return Clip(model_id, model.eval(), processor, config.text_config.max_position_embeddings)


def _causes(exc: BaseException) -> set[str]:
    """The class names of `exc` and of the exceptions it was raised from."""
    names: set[str] = set()
    while exc is not None and type(exc).__name__ not in names:
        names.add(type(exc).__name__)
        exc = exc.__cause__ or exc.__context__
    return names


def why_not(model_id: str, exc: BaseException) -> str:
    """The sentence for a CLIP model that cannot be loaded, from what loading it raised."""
    causes = _causes(exc)
    if "LocalEntryNotFoundError" in causes:
        return (
            f"no CLIP model: {model_id} is not in the local Hugging Face cache, and runs never download it: "
            f"fetch it once with `hf download {model_id}`, or set STUDIO_CLIP_MODEL to a local folder"
        )
    if "HFValidationError" in causes:
        if model_id.startswith((".", "/", "~")):
            return f"no CLIP model: there is no folder {model_id} (STUDIO_CLIP_MODEL)"
        return f"no CLIP model: {model_id!r} is neither a local folder nor a Hugging Face model id"
    detail = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    return f"no CLIP model: {model_id} could not be loaded ({detail})"


def clip(model_id: str) -> Clip | str:
    """The CLIP model `model_id`, loaded once per process (the last one asked for is kept), or the sentence
    saying why it cannot be loaded (a warning the first time; not tried again in this process)."""
    with _lock:
        found = _cache.get(model_id)
        if found is not None:
            return found
        try:
            loaded: Clip | str = _load(model_id)
        except LOAD_ERRORS as exc:
            loaded = why_not(model_id, exc)
            log.warning("%s; runs are logged without a prompt score", loaded)
            log.debug("loading the CLIP model %s failed", model_id, exc_info=exc)
        else:
            for other in [k for k, v in _cache.items() if isinstance(v, Clip)]:
                del _cache[other]  # one model held: a changed setting frees the previous one
        _cache[model_id] = loaded
        return loaded


def clip_score(image: np.ndarray, prompt: str, model: Clip) -> float:
    """torchmetrics' CLIP score of `image` (float, H x W x 3 in [0, 1]) for `prompt`: 100 x the cosine of
    their embeddings, floored at 0."""
    import torch
    from PIL import Image

    pil = Image.fromarray((np.clip(image, 0, 1) * 255).round().astype(np.uint8))
    inputs = model.processor(
        text=[prompt], images=[pil], return_tensors="pt", truncation=True, max_length=model.max_tokens
    )
    with torch.inference_mode():
        out = model.model(**inputs)
    cosine = torch.nn.functional.cosine_similarity(out.image_embeds, out.text_embeds).item()
    return max(100.0 * cosine, 0.0)


def _scored(
    image: np.ndarray, prompt: str, judged: dict[str, Any] | None
) -> tuple[float | None, str | None, str | None]:
    """(score, scorer, why there is none)."""
    if judged is not None and judged.get("score") is not None:
        return 100.0 * judged["score"], JUDGE, None
    model_id = settings.clip_model()
    if model_id is None:
        return None, None, "no CLIP model: STUDIO_CLIP_MODEL is off"
    found = clip(model_id)
    if isinstance(found, str):
        return None, None, found
    return clip_score(image, prompt, found), f"clip:{model_id}", None


def fields(
    image: np.ndarray, prompt: str, judged: dict[str, Any] | None, baseline: dict[str, Any] | None
) -> dict[str, Any]:
    """A run's prompt score as the run log keeps it (`FIELDS`): the score (0-100), its scorer ('clip:<model
    id>' or 'fidelity judge'), its change against the baseline's score in points (same scorer only), and the
    sentence saying why there is no score.

    Args:
        image: the run's first image (float, H x W x 3 in [0, 1]).
        prompt: the prompt it was made from.
        judged: what the model's own judge saw of the prompt (`quality.prompt_fidelity`); None without one.
        baseline: the baseline run's quality (its prompt score and scorer); None without a baseline.
    """
    score, by, note = _scored(image, prompt, judged)
    change = None
    if score is not None and baseline and baseline.get("prompt_score") is not None:
        change = score - baseline["prompt_score"] if baseline.get("prompt_score_by") == by else None
    return dict(zip(FIELDS, (score, by, change, note), strict=True))
