"""Checkers for loosely typed values (a form's strings, a client's JSON, argv): each returns the checked value
or raises a `ValidationError` whose sentence names the field, the allowed values and what was sent.

Used by the request boundary (`studio/request.py`) and by every technique's settings object; `parse_json` is
for any JSON that comes from outside (a form, a client, a file): its size and nesting are checked first."""

from __future__ import annotations

import json
import math
import re
from itertools import accumulate
from typing import Any

from studio.errors import ValidationError

MAX_JSON_CHARS = 1_000_000  # JSON a face or a file hands the studio: a request's settings are a few hundred
MAX_JSON_DEPTH = 32  # the studio's own JSON nests 4 deep; Python's parser recurses once per level
_JSON_STRING = re.compile(r'"(?:[^"\\]++|\\.)*+"?', re.S)  # possessive: linear time, an open string too
_NOT_BRACKET = re.compile(r"[^\[\]{}]++")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}.__getitem__

BOOL_WORDS = {
    "true": True,
    "1": True,
    "yes": True,
    "on": True,
    "false": False,
    "0": False,
    "no": False,
    "off": False,
}


def whole(name: str, value: Any, lo: int, hi: int) -> int:
    """A whole number in [lo, hi]; 4.0 and "4" pass, 2.5, "ten", True and None do not."""
    if isinstance(value, bool) or value is None or value == "":
        raise ValidationError(f"{name} must be a whole number between {lo} and {hi}.")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValidationError(
            f"{name} must be a whole number between {lo} and {hi}, not {value!r}."
        ) from None
    if not math.isfinite(number) or number != int(number) or not lo <= number <= hi:
        raise ValidationError(f"{name} must be a whole number between {lo} and {hi}, not {value!r}.")
    return int(number)


def number(name: str, value: Any, lo: float, hi: float) -> float:
    """A finite number in [lo, hi]."""
    try:
        result = float(value)
    except (TypeError, ValueError):
        raise ValidationError(f"{name} must be a number between {lo} and {hi}, not {value!r}.") from None
    if isinstance(value, bool) or not math.isfinite(result) or not lo <= result <= hi:
        raise ValidationError(f"{name} must be a finite number between {lo} and {hi}, not {value!r}.")
    return result


def boolean(name: str, value: Any) -> bool:
    """True or false, also as the words a form or argv sends ('true', 'off', '1', ...)."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in BOOL_WORDS:
        return BOOL_WORDS[text]
    raise ValidationError(f"{name} must be true or false, not {value!r}.")


def typed(value: Any) -> str:
    """A setting's value as a user types it back (`boolean` reads it): true and false, not Python's True."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def one_of(name: str, value: Any, allowed: tuple) -> Any:
    """One of `allowed`, compared as text (so '2' matches 2)."""
    matches = [a for a in allowed if str(a) == str(value).strip()]
    if not matches:
        raise ValidationError(f"{name} must be one of {', '.join(map(str, allowed))}, not {value!r}.")
    return matches[0]


def text(name: str, value: Any, limit: int, required: bool = False) -> str:
    """Text of at most `limit` characters, without NUL, stripped; `required` refuses an empty one."""
    if value is None:
        value = ""
    if not isinstance(value, str):
        raise ValidationError(f"{name} must be text, not {type(value).__name__}.")
    if "\x00" in value:
        raise ValidationError(f"{name} contains a NUL character; remove it.")
    if len(value) > limit:
        raise ValidationError(f"{name} is {len(value)} characters long; the limit is {limit}.")
    if required and not value.strip():
        raise ValidationError(f"{name} is empty; describe the image you want.")
    return value.strip()


def json_depth(text: str) -> int:
    """How deep the arrays and objects of JSON `text` nest (brackets inside strings do not count), found in
    linear time without parsing it."""
    brackets = _NOT_BRACKET.sub("", _JSON_STRING.sub("", text))
    return max(accumulate(map(_STEP, brackets)), default=0)


def parse_json(
    name: str, text: Any, limit: int = MAX_JSON_CHARS, depth: int = MAX_JSON_DEPTH, fix: str = ""
) -> Any:
    """JSON `text` (str or UTF-8 bytes) parsed, once its size and nesting are checked: a huge or deeply nested
    document is refused with a sentence before Python's parser sees it (which would end in a RecursionError).

    Args:
        name: what the text is, as the sentence names it ("settings", "The image's diffusion-studio text").
        text: the JSON.
        limit: the most characters accepted.
        depth: the most levels arrays and objects may nest.
        fix: what the user does instead, ending the sentence (by default: send a shorter, flatter or valid
            one).
    """
    if isinstance(text, bytes | bytearray):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError:
            raise ValidationError(
                f"{name} is not UTF-8 text, so not JSON. {fix or 'Send JSON text.'}"
            ) from None
    if not isinstance(text, str):
        raise ValidationError(f"{name} must be JSON text, not {type(text).__name__}.")
    if len(text) > limit:
        raise ValidationError(
            f"{name} is {len(text):,} characters long; the limit is {limit:,}. {fix or 'Send a shorter one.'}"
        )
    nested = json_depth(text)
    if nested > depth:
        raise ValidationError(
            f"{name} nests {nested:,} levels deep; the limit is {depth}. {fix or 'Send a flatter one.'}"
        )
    try:
        return json.loads(text)
    except ValueError as exc:  # a JSONDecodeError, or an integer of over 4,300 digits
        raise ValidationError(
            f"{name} is not valid JSON ({exc}). {fix or 'Correct it and send it again.'}"
        ) from None
