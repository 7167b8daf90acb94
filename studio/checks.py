"""Checkers for loosely typed values (a form's strings, a client's JSON, argv): each returns the checked value
or raises a `ValidationError` whose sentence names the field, the allowed values and what was sent.

Used by the request boundary (`studio/request.py`) and by every technique's settings object."""

from __future__ import annotations

import math
from typing import Any

from studio.errors import ValidationError

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
