"""The configuration inside the image: every PNG the studio saves carries the run that made it.

Two PNG text chunks: `parameters`, the human-readable text AUTOMATIC1111 writes (prompt, a `Negative
prompt:` line, then `Key: value` pairs), which A1111, SD.Next, ComfyUI viewers and image sites read; and
`diffusion-studio`, a JSON object: the run's run-log columns (model, techniques, settings, seed, steps,
size, scheduler, hardware, library versions) and its figures in the shared vocabulary (`KEYS`: run id,
configuration, latency, speedup when compared, peak memory...). `read` takes either back (the JSON when
present, else the `parameters` text of another tool) as the run log's column names, so a PNG can fill
Generate's form as a logged run does. Any file may arrive: `read` walks the PNG's chunks without decoding a
pixel, caps each text's size and nesting, and answers every file with a sentence.
"""

from __future__ import annotations

import contextlib
import json
import os
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from PIL import PngImagePlugin

from studio import checks
from studio.errors import ValidationError
from studio.report.a1111_text import parameters_text, parse_parameters
from studio.runlog.migrations import current_names

JSON_CHUNK = "diffusion-studio"
TEXT_CHUNK = "parameters"
FORMAT = 1

NO_METADATA = (
    "This image carries no generation settings: it was not saved by Diffusion Studio or another "
    "Stable Diffusion tool, or its metadata was removed (screenshots, chat apps and many editors drop it)."
)
_FIX = "Load a PNG the studio or another Stable Diffusion tool saved."
NOT_PNG = f"This file is not a PNG (no PNG signature): the studio reads settings only from PNG files. {_FIX}"
_LEFT_OUT = ("image_path",)  # where the file was first written says nothing about the run
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
MAX_TEXT = 65_536  # bytes of a text read or inflated: the studio's JSON is ~2 kB, a prompt 2,000 chars
MAX_DEPTH = 8  # the studio's JSON nests 3 deep (a GPU inside the hardware)
MAX_CHUNKS = 100_000  # chunks walked at most: a PNG's pixels come in a few dozen
_TEXT_KINDS = (b"tEXt", b"zTXt", b"iTXt")
_AS_REQUEST = ("prompt", "negative_prompt", "seed", "steps", "guidance", "width", "height", "scheduler")
# the run-log columns `fields_from_settings` gives as a request's fields
_AS_REQUEST += ("settings", "batch", "vae", "single_file_config", "loras")


def embedded(columns: dict[str, Any], record: dict[str, Any], index: int = 0) -> dict[str, Any]:
    """What one image carries: its run-log columns, its figures (`report.run_record`) and its index."""
    meta = {"format": FORMAT, "run_id": record.get("run_id"), "config": record.get("config")}
    meta.update(columns)
    meta.update({k: v for k, v in record.items() if k not in _LEFT_OUT})
    meta["image_index"] = index
    return meta


def chunks(meta: dict[str, Any]) -> dict[str, str]:
    """Both text chunks of an image: `parameters` and the JSON."""
    return {TEXT_CHUNK: parameters_text(meta), JSON_CHUNK: json.dumps(meta, default=str)}


def png_info(text: dict[str, Any]) -> PngImagePlugin.PngInfo:
    """The text chunks of `text` (an image's `info`: its other entries are left out), ready for
    `Image.save(path, pnginfo=...)`."""
    info = PngImagePlugin.PngInfo()
    for key in (TEXT_CHUNK, JSON_CHUNK):
        if isinstance(text.get(key), str):
            info.add_text(key, text[key])
    return info


@dataclass(frozen=True)
class ImageSettings:
    """What `read` found: the settings as run-log column names (None when there are none), the chunk
    they came from, and a sentence for the user."""

    settings: dict[str, Any] | None
    source: str | None
    message: str


def _inflate(data: bytes, key: str) -> bytes:
    """A compressed text chunk, inflated to at most `MAX_TEXT` bytes (a zlib bomb stops there)."""
    try:
        out = zlib.decompressobj().decompress(data, MAX_TEXT + 1)
    except zlib.error:
        raise ValidationError(f"The image's {key} text is damaged (it does not decompress). {_FIX}") from None
    if len(out) > MAX_TEXT:
        raise ValidationError(f"The image's {key} text inflates past {MAX_TEXT:,} bytes. {_FIX}")
    return out


def _chunk_text(kind: bytes, data: bytes, key: str) -> str:
    """The text of a tEXt (Latin-1), zTXt (compressed Latin-1) or iTXt (UTF-8, maybe compressed) chunk."""
    rest = data.partition(b"\0")[2]
    if kind == b"tEXt":
        return rest.decode("latin-1")
    if kind == b"zTXt":
        return _inflate(rest[1:], key).decode("latin-1")
    compressed, rest = rest[:1] == b"\x01", rest[2:]
    text = rest.split(b"\0", 2)[-1]  # after the language tag and the translated keyword
    try:
        return (_inflate(text, key) if compressed else text).decode("utf-8")
    except UnicodeDecodeError:
        raise ValidationError(f"The image's {key} text is not UTF-8. {_FIX}") from None


def _chunk(f: IO[bytes], kind: bytes, length: int) -> tuple[str, str] | None:
    """The keyword and text of the chunk `f` is at, or None (skipped) when it is not a text chunk the studio
    reads; one of the studio's over `MAX_TEXT` bytes, or damaged, is refused."""
    if kind not in _TEXT_KINDS:
        f.seek(length + 4, os.SEEK_CUR)
        return None
    start = f.read(min(length, 80))  # a keyword is at most 79 bytes
    key = start.partition(b"\0")[0].decode("latin-1")
    if key not in (JSON_CHUNK, TEXT_CHUNK):
        f.seek(length - len(start) + 4, os.SEEK_CUR)
        return None
    if length > MAX_TEXT:
        raise ValidationError(
            f"The image's {key} text is {length:,} bytes; the limit is {MAX_TEXT:,}. {_FIX}"
        )
    data = start + f.read(length - len(start))
    crc = f.read(4)
    if len(data) < length or len(crc) < 4:
        raise ValidationError(
            f"The file ends inside the image's {key} text: it is truncated. Load all of it."
        )
    if zlib.crc32(kind + data) != int.from_bytes(crc, "big"):
        raise ValidationError(f"The image's {key} text is damaged (its checksum does not match). {_FIX}")
    return key, _chunk_text(kind, data, key)


def _png_text(f: IO[bytes]) -> tuple[dict[str, str], bool]:
    """The studio's text chunks of the PNG `f` is at (past its signature), and whether the file ends before
    its end chunk. Chunk by chunk: pixels are skipped, never decoded, so a decompression bomb costs a seek."""
    found: dict[str, str] = {}
    for index in range(MAX_CHUNKS):
        head = f.read(8)
        if len(head) < 8:
            return found, True
        length, kind = struct.unpack(">I4s", head)
        if index == 0 and kind != b"IHDR":
            raise ValidationError(f"This file starts like a PNG but is not one (no header chunk). {_FIX}")
        if kind == b"IEND":
            return found, False
        text = _chunk(f, kind, length)
        if text is not None:
            found.setdefault(*text)
        if len(found) == 2:
            return found, False
    raise ValidationError(f"This PNG has over {MAX_CHUNKS:,} chunks; no tool writes that. {_FIX}")


def _short(value: Any, limit: int = 60) -> str:
    text = str(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _from_json(text: str) -> tuple[dict[str, Any] | None, str]:
    """The studio's JSON chunk, as run-log columns in today's names (an earlier release's included), or None
    and why not."""
    name = f"The image's {JSON_CHUNK} text"
    meta = checks.parse_json(name, text, MAX_TEXT, MAX_DEPTH, _FIX)
    if not isinstance(meta, dict):
        return None, f"{name} is not a JSON object. {_FIX}"
    return current_names(meta), ""


def read(source: str | Path | IO[bytes]) -> ImageSettings:
    """The settings a PNG carries: the studio's JSON when present, else another tool's `parameters`.

    Never raises for what a file holds: a file that is not an image, truncated or damaged, or whose text is
    too large or too deeply nested, gets a sentence in `message` (pixels are never decoded). The settings
    are a file's claims: check them as a typed request before use (`fields_from_settings`)."""
    try:
        with open(source, "rb") if isinstance(source, str | Path) else contextlib.nullcontext(source) as f:
            if f.read(8) != PNG_SIGNATURE:
                return ImageSettings(None, None, NOT_PNG)
            chunks, truncated = _png_text(f)
    except OSError as exc:
        return ImageSettings(None, None, f"This file could not be read as an image ({exc}). {_FIX}")
    except ValidationError as exc:
        return ImageSettings(None, None, str(exc))
    note = ""
    if JSON_CHUNK in chunks:
        try:
            meta, note = _from_json(chunks[JSON_CHUNK])
        except ValidationError as exc:
            meta, note = None, str(exc)
        if meta is not None:
            run = f"run {_short(meta['run_id'], 20)}" if meta.get("run_id") is not None else "a run"
            message = f"Settings of {run} ({_short(meta.get('config'))}), saved by the studio."
            return ImageSettings(meta, JSON_CHUNK, message)
    if chunks.get(TEXT_CHUNK, "").strip():
        meta = parse_parameters(chunks[TEXT_CHUNK])
        named = ", ".join(k for k in meta if k != "prompt") or "nothing else"
        message = (
            f"Settings from the image's `parameters` text (another tool): the prompt and {named}; "
            f"it names no techniques. {note}"
        )
        return ImageSettings(meta, TEXT_CHUNK, message.strip())
    if truncated and not note:
        note = "This PNG is truncated and what it holds carries no generation settings; load all of the file."
    return ImageSettings(None, None, note or NO_METADATA)


def fields_from_settings(settings: dict[str, Any], model: str) -> dict[str, Any]:
    """The settings an image carries as `studio.request.build_request`'s fields, so that a face checks them
    exactly as it checks a typed request: `build_request(**fields_from_settings(found.settings, model))`.

    Args:
        settings: `read(...).settings` (run-log column names).
        model: the model to check them with when the image names none (another tool's `parameters`).
    """
    fields = {c: settings[c] for c in _AS_REQUEST if settings.get(c) is not None}
    requested = settings.get("requested")  # weights precision (bf16, fp16) is among the techniques
    return {**fields, "model": settings.get("model") or model, "precision": None, "optimizations": requested}


def _mapping(value: Any) -> dict:  # a file's JSON may hold anything where a mapping belongs
    return value if isinstance(value, dict) else {}


def describe(found: ImageSettings) -> str:
    """The settings as a few lines a person reads at a glance (`python -m studio show`)."""
    meta = found.settings
    if meta is None or found.source == TEXT_CHUNK:
        return found.message + ("" if meta is None else "\n" + json.dumps(meta, indent=2))
    get = meta.get
    lines = [found.message, f"model {get('model')} on {get('device')}, weights {get('dtype')}"]
    lines.append(f"prompt: {get('prompt')}")
    if get("negative_prompt"):
        lines.append(f"negative prompt: {get('negative_prompt')}")
    lines.append(
        f"seed {get('seed')}, {get('steps')} steps, {get('width')}x{get('height')}, "
        f"guidance {get('guidance')}, scheduler {get('scheduler')}"
    )
    if get("settings"):
        lines.append(f"technique settings: {json.dumps(get('settings'))}")
    figures = (
        ("latency_s", "latency {:.3f} s"),
        ("speedup", "speedup x{:.2f} vs its baseline"),
        ("peak_memory_mb", f"peak memory {{:.0f}} MB ({_short(get('memory_kind'))})"),
    )
    numbers = [
        (f, get(k)) for k, f in figures if isinstance(get(k), int | float) and not isinstance(get(k), bool)
    ]
    lines.append(", ".join(f.format(v) for f, v in numbers))
    hardware, devices = _mapping(get("hardware")), _mapping(get("hardware")).get("devices")
    cpu = hardware.get("cpu_name") or hardware.get("cpu")  # images written before the name had its generation
    lines.append(
        f"hardware: {cpu}, devices {', '.join(map(str, devices if isinstance(devices, list) else []))}"
    )
    lines.append("versions: " + ", ".join(f"{k} {v}" for k, v in _mapping(get("versions")).items()))
    return "\n".join(lines)
