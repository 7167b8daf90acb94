"""The prompt language of tiny-shapes and its generation defaults (light: no torch import)."""

from __future__ import annotations

import re

from .dataset import BACKGROUNDS, COLOURS, IMAGE_SIZE, POSITION_PHRASES, SHAPES, SIZES

DEFAULT_STEPS = 20
DEFAULT_GUIDANCE = 6.0
DEFAULT_SIZE = IMAGE_SIZE
EXAMPLE_PROMPT = "a big red circle on the left, on a white background"

_WORD_RE = re.compile(r"[^\W\d_]+|\d|[^\s\w]+", re.UNICODE)


def language_words() -> list[str]:
    """Every word of the prompt language, sorted (punctuation included)."""
    words = {"a", "on", "background", ",", "center"}
    words.update(SHAPES, COLOURS, BACKGROUNDS, SIZES)
    for phrase in POSITION_PHRASES.values():
        words.update(phrase.split())
    return sorted(words)


def unknown_words(prompt: str) -> list[str]:
    """Words of ``prompt`` the model does not know; they are ignored (read as an unknown token).

    Args:
        prompt: free text, any case.

    Returns:
        The unknown words in order of first appearance, lower-cased, each once.
    """
    known = set(language_words())
    seen: list[str] = []
    for word in _WORD_RE.findall(prompt.lower()):
        if word not in known and word not in seen:
            seen.append(word)
    return seen


def vocabulary_warning(prompt: str) -> str | None:
    """A sentence naming the words of ``prompt`` the model ignores, or None when it knows them all."""
    unknown = unknown_words(prompt)
    if not unknown:
        return None
    return (
        f"tiny-shapes does not know {', '.join(repr(w) for w in unknown)}; those words were ignored. "
        "It knows shapes, colours, sizes, positions and backgrounds, e.g. 'a big red circle on the left, "
        "on a white background'."
    )
