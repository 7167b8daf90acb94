"""The configuration inside the image: every PNG the studio saves carries the run that made it.

Two PNG text chunks: `parameters`, the human-readable text AUTOMATIC1111 writes (prompt, a `Negative
prompt:` line, then `Key: value` pairs), which A1111, SD.Next, ComfyUI viewers and image sites read; and
`diffusion-studio`, a JSON object: the run's run-log columns (model, techniques, settings, seed, steps,
size, scheduler, hardware, library versions) and its figures in the shared vocabulary (`KEYS`: run id,
configuration, latency, speedup when compared, peak memory...). `read` takes either back (the JSON when
present, else the `parameters` text of another tool) as the run log's column names, so a PNG can fill
Generate's form as a logged run does.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from PIL import Image, PngImagePlugin, UnidentifiedImageError

from pipelines.schedulers import A1111_SAMPLERS

JSON_CHUNK = "diffusion-studio"
TEXT_CHUNK = "parameters"
FORMAT = 1

NO_METADATA = (
    "This image carries no generation settings: it was not saved by Diffusion Studio or another "
    "Stable Diffusion tool, or its metadata was removed (screenshots, chat apps and many editors drop it)."
)
_LEFT_OUT = ("image_path",)  # where the file was first written says nothing about the run


def embedded(columns: dict[str, Any], record: dict[str, Any], index: int = 0) -> dict[str, Any]:
    """What one image carries: its run-log columns, its figures (`report.run_record`) and its index."""
    meta = {"format": FORMAT, "run_id": record.get("run_id"), "config": record.get("config")}
    meta.update(columns)
    meta.update({k: v for k, v in record.items() if k not in _LEFT_OUT})
    meta["image_index"] = index
    return meta


def _quote(value: Any) -> str:
    """A value as A1111 writes it: JSON-quoted when it holds a separator."""
    text = str(value)
    return json.dumps(text) if any(c in text for c in ',:"\n') else text


def parameters_text(meta: dict[str, Any]) -> str:
    """The `parameters` chunk: prompt, negative prompt, then the settings and figures as `Key: value`."""
    pairs = {
        "Steps": meta.get("steps"),
        "Sampler": A1111_SAMPLERS.get(meta.get("scheduler") or ""),  # none for the pipeline's own
        "CFG scale": meta.get("guidance"),
        "Seed": meta.get("seed"),
        "Size": f"{meta.get('width')}x{meta.get('height')}",
        "Model": meta.get("model"),
        "VAE": Path(meta["vae"]).name if meta.get("vae") else None,  # as A1111 writes it: the file's name
        "Batch size": meta.get("num_images") if (meta.get("num_images") or 1) > 1 else None,
        "Precision": meta.get("dtype"),
        "Optimizations": meta.get("config"),
        "Device": meta.get("device"),
        "Latency": None if meta.get("latency_s") is None else f"{meta['latency_s']:.3f} s",
        "Speedup": None if meta.get("speedup") is None else f"x{meta['speedup']:.2f}",
        "Run": meta.get("run_id"),
        "Version": f"Diffusion Studio (diffusers {(meta.get('versions') or {}).get('diffusers', '?')})",
    }
    body = ", ".join(f"{k}: {_quote(v)}" for k, v in pairs.items() if v is not None)
    lines = [meta.get("prompt") or ""]
    if meta.get("negative_prompt"):
        lines.append(f"Negative prompt: {meta['negative_prompt']}")
    return "\n".join([*lines, body])


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


_PAIR = re.compile(r'\s*([\w /+-]+):\s*("(?:\\.|[^"\\])*"|[^,]*)(?:,|$)')
_NUMBERS = {"Steps": ("steps", int), "CFG scale": ("guidance", float), "Seed": ("seed", int)}


def parse_parameters(text: str) -> dict[str, Any]:
    """AUTOMATIC1111's `parameters` text as run-log column names (what it names; the rest is left out)."""
    lines = text.strip().split("\n")
    pairs: dict[str, str] = {}
    if len(lines) > 1 and len(_PAIR.findall(lines[-1])) >= 2:
        for key, value in _PAIR.findall(lines.pop()):
            pairs[key.strip()] = json.loads(value) if value.startswith('"') else value.strip()
    negative = [i for i, line in enumerate(lines) if line.startswith("Negative prompt:")]
    cut = negative[0] if negative else len(lines)
    meta: dict[str, Any] = {"prompt": "\n".join(lines[:cut]).strip()}
    if negative:
        meta["negative_prompt"] = "\n".join(lines[cut:]).removeprefix("Negative prompt:").strip()
    for key, (column, kind) in _NUMBERS.items():
        if key in pairs:
            try:
                meta[column] = kind(pairs[key])
            except ValueError:
                continue  # a value this studio cannot use (e.g. "Seed: -1") leaves the form's own
    size = re.fullmatch(r"(\d+)x(\d+)", pairs.get("Size", ""))
    if size:
        meta["width"], meta["height"] = int(size[1]), int(size[2])
    by_sampler = {v: k for k, v in A1111_SAMPLERS.items()}
    if pairs.get("Sampler") in by_sampler:
        meta["scheduler"] = by_sampler[pairs["Sampler"]]
    if "Model" in pairs:  # a checkpoint's file name in that tool, not a model this studio can load
        meta["other_tool_model"] = pairs["Model"]
    return meta


@dataclass(frozen=True)
class ImageSettings:
    """What `read` found: the settings as run-log column names (None when there are none), the chunk
    they came from, and a sentence for the user."""

    settings: dict[str, Any] | None
    source: str | None
    message: str


def read(source: str | Path | IO[bytes]) -> ImageSettings:
    """The settings a PNG carries: the studio's JSON when present, else another tool's `parameters`."""
    try:
        with Image.open(source) as img:
            chunks = dict(getattr(img, "text", None) or {})
    except (UnidentifiedImageError, OSError) as exc:
        return ImageSettings(None, None, f"This file could not be read as an image ({exc}).")
    if JSON_CHUNK in chunks:
        try:
            meta = json.loads(chunks[JSON_CHUNK])
        except json.JSONDecodeError:
            meta = None
        if isinstance(meta, dict):
            run = f"run {meta['run_id']}" if meta.get("run_id") is not None else "a run"
            return ImageSettings(
                meta, JSON_CHUNK, f"Settings of {run} ({meta.get('config')}), saved by the studio."
            )
    if chunks.get(TEXT_CHUNK, "").strip():
        meta = parse_parameters(chunks[TEXT_CHUNK])
        named = ", ".join(k for k in meta if k != "prompt") or "nothing else"
        return ImageSettings(
            meta,
            TEXT_CHUNK,
            f"Settings from the image's `parameters` text (another tool): the prompt and {named}; "
            "it names no techniques.",
        )
    return ImageSettings(None, None, NO_METADATA)


def describe(found: ImageSettings) -> str:
    """The settings as a few lines a person reads at a glance (`python -m studio show`)."""
    meta = found.settings
    if meta is None:
        return found.message
    if found.source == TEXT_CHUNK:
        return found.message + "\n" + json.dumps(meta, indent=2)
    lines = [
        found.message,
        f"model {meta.get('model')} on {meta.get('device')}, weights {meta.get('dtype')}",
        f"prompt: {meta.get('prompt')}",
    ]
    if meta.get("negative_prompt"):
        lines.append(f"negative prompt: {meta['negative_prompt']}")
    lines.append(
        f"seed {meta.get('seed')}, {meta.get('steps')} steps, {meta.get('width')}x{meta.get('height')}, "
        f"guidance {meta.get('guidance')}, scheduler {meta.get('scheduler')}"
    )
    if meta.get("settings"):
        lines.append(f"technique settings: {json.dumps(meta['settings'])}")
    figures = [f"latency {meta['latency_s']:.3f} s" if meta.get("latency_s") is not None else None]
    if meta.get("speedup") is not None:
        figures.append(f"speedup x{meta['speedup']:.2f} vs its baseline")
    if meta.get("peak_memory_mb") is not None:
        figures.append(f"peak memory {meta['peak_memory_mb']:.0f} MB ({meta.get('memory_kind')})")
    lines.append(", ".join(f for f in figures if f))
    hardware, versions = meta.get("hardware") or {}, meta.get("versions") or {}
    cpu = hardware.get("cpu_name") or hardware.get("cpu")  # images written before the name had its generation
    lines.append(f"hardware: {cpu}, devices {', '.join(hardware.get('devices') or [])}")
    lines.append("versions: " + ", ".join(f"{k} {v}" for k, v in versions.items()))
    return "\n".join(lines)
