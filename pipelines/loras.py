"""LoRAs as users name them: `SOURCE[:SCALE]` in a request or on the command line, AUTOMATIC1111's
`<lora:NAME:SCALE>` tags in a prompt, a name in the LoRA folders, a local `.safetensors` path or a hub id.
What a file holds, whether it fits a model and the cache of its tensors are `pipelines.lora_files`
(re-exported here); nothing here reads more of a weights file than its header."""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import huggingface_hub
from huggingface_hub import constants
from huggingface_hub.errors import EntryNotFoundError, LocalEntryNotFoundError, RepositoryNotFoundError

from pipelines.errors import ValidationError
from pipelines.lora_files import CacheStats as CacheStats
from pipelines.lora_files import LoraCache as LoraCache
from pipelines.lora_files import LoraFile as LoraFile
from pipelines.lora_files import describe
from pipelines.lora_files import fits as fits
from pipelines.lora_files import inspect_lora as inspect_lora
from pipelines.lora_files import short_hash as short_hash
from pipelines.sources import ASSETS, HUB_ID, check_allowed, read_header, refuse_pickle

log = logging.getLogger(__name__)
MAX_LORAS = 8
MAX_SCALE = 10.0
DIFFUSERS_FILE = "pytorch_lora_weights.safetensors"  # what diffusers' save_lora_weights writes
# AUTOMATIC1111's extra-network tags (modules/extra_networks.py: `<(\w+):([^>]+)>`, arguments split on ":"),
# for its "lora" network and "lyco", the alias it keeps for the LyCORIS extension's older tags.
TAG = re.compile(r"<(?:lora|lyco):([^>]*)>", re.IGNORECASE)
LISTING = "`python -m studio loras` lists the ones it finds"


@dataclass(frozen=True)
class LoraRef:
    """A LoRA a request asks for: `source` (a name in the LoRA folders, a `.safetensors` path or a hub id) and
    the `scale` its weights are added with; `text_encoder_scale` is the text encoder's when a prompt tag gives
    it apart (AUTOMATIC1111's `<lora:NAME:TE:UNET>`), None for the same as `scale`."""

    source: str
    scale: float = 1.0
    text_encoder_scale: float | None = None


def _scale(value: Any, what: str) -> float:
    """`value` as a LoRA scale, or ValidationError naming `what`: a finite number of at most MAX_SCALE."""
    try:
        scale = float(value) if not isinstance(value, bool) else math.nan
    except (TypeError, ValueError):
        raise ValidationError(f"The scale of {what} must be a number, like 0.8; got {value!r}.") from None
    if not math.isfinite(scale) or abs(scale) > MAX_SCALE:
        raise ValidationError(
            f"The scale of {what} must be a finite number from -{MAX_SCALE:g} to {MAX_SCALE:g}: {value!r}."
        )
    return scale


def _number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def parse_lora(text: str) -> LoraRef:
    """`SOURCE` or `SOURCE:SCALE` -> a LoraRef (scale 1.0 by default). The scale is what follows the last
    colon when that reads as a number; otherwise the whole text is the source."""
    text = text.strip() if isinstance(text, str) else ""
    source, colon, tail = text.rpartition(":")
    if not colon or not _number(tail):
        source, tail = text, "1"
    source = source.strip()
    if not source:
        raise ValidationError(f"A LoRA needs a source before its scale (NAME:SCALE); got {text!r}.")
    return LoraRef(source, _scale(tail.strip(), f"LoRA {source!r}"))


def _one(item: Any) -> list[LoraRef]:
    if isinstance(item, LoraRef):
        return [item]
    if isinstance(item, str):
        return [parse_lora(part) for part in re.split(r"[,\n]", item) if part.strip()]
    if isinstance(item, dict):
        source = item.get("source", item.get("name"))
        known = {"source", "name", "scale", "hash"}  # a logged run's LoRA carries its hash
        if not isinstance(source, str) or not source.strip() or set(item) - known:
            raise ValidationError(
                f"A LoRA given as an object takes a 'source' (or 'name') and a 'scale'; got {item!r}."
            )
        ref = parse_lora(source) if "scale" not in item else LoraRef(source.strip(), 1.0)
        scale = _scale(item["scale"], f"LoRA {ref.source!r}") if "scale" in item else ref.scale
        return [LoraRef(ref.source, scale)]
    raise ValidationError(f"A LoRA is given as text (SOURCE or SOURCE:SCALE), not {item!r}.")


def parse_loras(values: Any) -> tuple[LoraRef, ...]:
    """The LoRAs a request names: None or "" (none), one text of `SOURCE[:SCALE]` items separated by commas or
    new lines, or a list of such texts, of `{"source" (or "name"): ..., "scale": ...}` objects or of LoraRefs.
    At most MAX_LORAS, and no source twice."""
    if values is None or (isinstance(values, str) and not values.strip()):
        return ()
    items = [values] if isinstance(values, str | dict | LoraRef) else values
    if not isinstance(items, Iterable):
        raise ValidationError(f"loras must be a list of SOURCE:SCALE texts, not {values!r}.")
    refs = [ref for item in items for ref in _one(item)]
    if len(refs) > MAX_LORAS:
        raise ValidationError(f"At most {MAX_LORAS} LoRAs go on one model at once; {len(refs)} were given.")
    seen: set[str] = set()
    for ref in refs:
        if ref.source in seen:
            raise ValidationError(
                f"LoRA {ref.source!r} is named twice; give it once, with the scale you want."
            )
        seen.add(ref.source)
    return tuple(refs)


def _tag(match: re.Match[str]) -> LoraRef:
    """One `<lora:...>` tag as AUTOMATIC1111 reads it (extensions-builtin/Lora/extra_networks_lora.py): the
    arguments split on ":", those with "=" named; the name, then the text encoder's multiplier (1.0 by
    default), then the UNet's (the text encoder's by default); `te=` and `unet=` override them. A fourth
    positional argument (a dynamic dimension) is ignored."""
    positional, named = [], {}
    for item in match.group(1).split(":"):
        parts = item.split("=")
        if len(parts) == 2:
            named[parts[0].strip()] = parts[1].strip()
        else:
            positional.append(item.strip())
    name = positional[0] if positional else ""
    if not name:
        raise ValidationError(
            f"The tag {match.group(0)!r} names no LoRA: write <lora:NAME> or <lora:NAME:0.8>."
        )
    what = f"the tag {match.group(0)!r}"
    te = _scale(named.get("te", positional[1] if len(positional) > 1 else 1.0), what)
    unet = _scale(named.get("unet", positional[2] if len(positional) > 2 else te), what)
    return LoraRef(name, unet, None if te == unet else te)


def loras_in_prompt(prompt: str) -> tuple[str, tuple[LoraRef, ...]]:
    """AUTOMATIC1111's `<lora:NAME>`, `<lora:NAME:SCALE>` and `<lora:NAME:TE:UNET>` tags (and `<lyco:...>`)
    taken out of `prompt`: the prompt to encode (tags removed, the commas and spaces they leave doubled
    tidied, stripped; a prompt without tags comes back unchanged) and the LoRAs, checked as `parse_loras`
    checks them."""
    refs = [_tag(m) for m in TAG.finditer(prompt)]
    if not refs:
        return prompt, ()
    text = TAG.sub("", prompt)
    text = re.sub(r"[ \t]+", " ", text)
    text = re.sub(r" *,(?: *,)+", ",", text)
    text = re.sub(r" +,", ",", text)
    text = re.sub(r"^[ \t,]+|[ \t,]+$", "", text, flags=re.MULTILINE).strip()
    return text, parse_loras(refs)


def lora_folders(home: Path) -> list[Path]:
    """Where LoRAs are found by name, in order: the studio home's loras/, then the bundled assets/loras/."""
    return [Path(home) / "loras", ASSETS / "loras"]


def _warn_skipped(path: Path, why: Exception) -> None:
    log.warning("Skipped the LoRA file %s: %s", path, why)


def find_loras(folders: Sequence[Path]) -> list[LoraFile]:
    """Every `.safetensors` LoRA under `folders` (recursively), sorted by name; the first folder wins when two
    hold the same name. A file that cannot be read as a LoRA is skipped with a warning naming it."""
    found: dict[str, LoraFile] = {}
    for folder in folders:
        for path in sorted(Path(folder).rglob("*.safetensors")) if Path(folder).is_dir() else ():
            name = path.relative_to(folder).with_suffix("").as_posix()
            if name not in found:
                try:
                    found[name] = describe(path.resolve(), read_header(path, "LoRA file"), name)
                except (ValidationError, OSError) as exc:
                    _warn_skipped(path, exc)
    return sorted(found.values(), key=lambda lora: lora.name)


def _in_folders(source: str, folders: Sequence[Path]) -> LoraFile | None:
    """The LoRA named `source` in `folders`: its path under one without the suffix, else (a bare name) the
    only file of that stem in the first folder that has one; None when there is none."""
    name = source.removesuffix(".safetensors")
    if not name or ".." in Path(name).parts or name.startswith((".", "/", "~")):  # a path, not a name
        return None
    for folder in folders:
        path = Path(folder) / f"{name}.safetensors"
        if path.is_file():
            return describe(path.resolve(), read_header(path, "LoRA file"), name)
    for folder in folders if "/" not in name else ():
        same = sorted(Path(folder).rglob(f"{name}.safetensors")) if Path(folder).is_dir() else []
        if len(same) > 1:
            names = ", ".join(p.relative_to(folder).with_suffix("").as_posix() for p in same)
            raise ValidationError(
                f"LoRA name {name!r} matches several files in {folder} ({names}); use one of those."
            )
        if same:
            rel = same[0].relative_to(folder).with_suffix("").as_posix()
            return describe(same[0].resolve(), read_header(same[0], "LoRA file"), rel)
    return None


def _hub_file(repo: str, filename: str | None, folders: Sequence[Path]) -> Path:
    """The local path of a hub LoRA's file, downloaded into the hub cache unless HF_HUB_OFFLINE is set (then
    only a cached file is found): `filename`, else diffusers' own file name, else the repository's only
    .safetensors file."""
    offline = bool(constants.HF_HUB_OFFLINE)
    wanted = filename or DIFFUSERS_FILE
    try:
        try:
            return Path(huggingface_hub.hf_hub_download(repo, wanted, local_files_only=offline))
        except EntryNotFoundError as exc:  # not cached offline, unreachable online, or not in the repository
            if filename or (isinstance(exc, LocalEntryNotFoundError) and not offline):
                raise
        if offline:  # the files of the repository already in the hub cache
            folder = Path(huggingface_hub.snapshot_download(repo, local_files_only=True))
            files = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*.safetensors"))
        else:
            files = [f for f in huggingface_hub.list_repo_files(repo) if f.endswith(".safetensors")]
        if len(files) != 1:
            listed = ", ".join(files[:6]) or "none"
            raise ValidationError(
                f"Hub repository {repo!r} holds {len(files)} .safetensors files ({listed}); name the LoRA's "
                f"as {repo}/FILE.safetensors."
            )
        return Path(huggingface_hub.hf_hub_download(repo, files[0], local_files_only=offline))
    except RepositoryNotFoundError:
        raise ValidationError(
            f"There is no LoRA repository {repo!r} on the Hugging Face Hub (or it is private: log in with "
            "`hf auth login`)."
        ) from None
    except LocalEntryNotFoundError:
        raise ValidationError(
            f"LoRA {repo + ('/' + filename if filename else '')!r} is not in the Hugging Face cache and the "
            f"hub is offline or unreachable: run `hf download {repo} {wanted}` where it is reachable, or put "
            f"the file in {Path(folders[0]) if folders else 'a LoRA folder'}."
        ) from None
    except EntryNotFoundError:
        raise ValidationError(f"Hub repository {repo!r} has no file {filename!r}.") from None
    except ValidationError:
        raise
    # the hub client's network errors share no class (its HTTP library's are no OSError)
    except Exception as exc:
        raise ValidationError(
            f"LoRA {repo!r} could not be fetched from the Hugging Face Hub ({exc})."
        ) from None


def resolve_lora(source: str, folders: Sequence[Path]) -> LoraFile:
    """The LoRA file `source` names: a name in `folders` (`find_loras`' names, or a bare stem found once),
    else a local `.safetensors` path inside the allowed roots (absolute, or relative to the working
    directory), else a hub id `owner/name` (its `pytorch_lora_weights.safetensors`, else its only
    .safetensors file) or `owner/name/FILE.safetensors`. A pickle is refused before any look-up; anything
    else gets a sentence."""
    source = source.strip() if isinstance(source, str) else ""
    if not source:
        raise ValidationError(f"A LoRA needs a name, a .safetensors path or a hub id; {LISTING}.")
    refuse_pickle(source, "LoRA")
    found = _in_folders(source, folders)
    if found:
        return found
    path = Path(source).expanduser()
    if path.exists() or source.startswith((".", "/", "~")):
        check_allowed(source, "LoRA")
        return inspect_lora(path)
    parts = source.split("/")
    repo = "/".join(parts[:2])
    filename = "/".join(parts[2:]) or None
    if HUB_ID.match(repo) and ".." not in source and (filename is None or filename.endswith(".safetensors")):
        check_allowed(source, "LoRA")
        local = _hub_file(repo, filename, folders)
        if local.suffix != ".safetensors":
            raise ValidationError(f"LoRA {source!r} is not a .safetensors file; the studio loads only those.")
        return describe(local, read_header(local, "LoRA file"), source)
    where = ", ".join(str(f) for f in folders) or "no LoRA folder"
    raise ValidationError(f"There is no LoRA named {source!r} in {where}; {LISTING}.")
