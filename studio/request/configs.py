"""A configuration as written: technique names, each with its settings in brackets, the way results label
it ('bf16+deepcache[interval=2]'). Parsed here, checked with the request in `studio.request.generation`."""

from __future__ import annotations

import re
from typing import Any

from studio.errors import ValidationError


def parse_opts(value: Any) -> list[str]:
    """Accept a list of names or a comma/plus separated string; 'baseline' means none."""
    if value is None:
        return []
    if isinstance(value, str):
        value = re.split(r"[,+\s]+", value)
    if not isinstance(value, list | tuple | set | frozenset):
        raise ValidationError(f"optimizations must be a list of names, not {type(value).__name__}.")
    names = []
    for item in value:
        if not isinstance(item, str):
            raise ValidationError(f"optimization names must be text, not {item!r}.")
        item = item.strip()
        if item and item != "baseline" and item not in names:
            names.append(item)
    return names


CONFIG_ITEM = re.compile(r"([^+,\s\[\]]+)(?:\[([^\[\]]*)\])?")


def parse_config(value: Any) -> tuple[list[str], dict[str, dict[str, str]]]:
    """A configuration as Compare takes it, written the way results label it:
    'openvino[mode=hybrid_int8,inference_precision=auto]+cfg_cutoff[after=0.5]' -> the technique names and
    the settings given in brackets (checked later, with the request). A list is names only."""
    if not isinstance(value, str):
        return parse_opts(value), {}
    names: list[str] = []
    settings: dict[str, dict[str, str]] = {}
    rest = value
    for match in CONFIG_ITEM.finditer(value):
        name, body = match.group(1).strip(), match.group(2)
        rest = rest.replace(match.group(0), " ", 1)
        if name != "baseline" and name not in names:
            names.append(name)
        for pair in filter(None, (body or "").split(",")):
            key, sep, setting = pair.partition("=")
            if not sep or not key.strip():
                raise ValidationError(f"In {value!r}, {pair!r} must look like setting=value.")
            settings.setdefault(name, {})[key.strip()] = setting.strip()
    if rest.strip(" +,"):
        raise ValidationError(f"{value!r} is not a configuration such as 'bf16+deepcache[interval=2]'.")
    return names, settings
