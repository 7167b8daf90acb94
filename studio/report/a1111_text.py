"""AUTOMATIC1111's `parameters` text, which A1111, SD.Next, ComfyUI viewers and image sites read: the prompt
(with its LoRAs as `<lora:NAME:SCALE>` tags), a `Negative prompt:` line, then `Key: value` pairs (`Lora
hashes:` among them). `parameters_text` writes it from a run's columns and figures, `parse_parameters` reads
one back as run-log column names (`studio.report.image_metadata` carries it in every PNG).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from pipelines.loras import loras_in_prompt
from pipelines.schedulers import A1111_SAMPLERS
from studio import checks
from studio.errors import ValidationError


def _quote(value: Any) -> str:
    """A value as A1111 writes it: JSON-quoted when it holds a separator."""
    text = str(value)
    return json.dumps(text) if any(c in text for c in ',:"\n') else text


def parameters_text(meta: dict[str, Any]) -> str:
    """The `parameters` chunk: prompt (with its LoRAs' `<lora:NAME:SCALE>` tags), negative prompt, then the
    settings and figures as `Key: value`."""
    loras = meta.get("loras") or []
    pairs = {
        "Steps": meta.get("steps"),
        "Sampler": A1111_SAMPLERS.get(meta.get("scheduler") or ""),  # none for the pipeline's own
        "CFG scale": meta.get("guidance"),
        "Seed": meta.get("seed"),
        "Size": f"{meta.get('width')}x{meta.get('height')}",
        "Model": meta.get("model"),
        "VAE": Path(meta["vae"]).name if meta.get("vae") else None,  # as A1111 writes it: the file's name
        "Batch size": meta.get("batch") if (meta.get("batch") or 1) > 1 else None,
        "Precision": meta.get("dtype"),
        "Optimizations": meta.get("config"),
        "Device": meta.get("device"),
        "Latency": None if meta.get("latency_s") is None else f"{meta['latency_s']:.3f} s",
        "Speedup": None if meta.get("speedup") is None else f"x{meta['speedup']:.2f}",
        "Run": meta.get("run_id"),
        "Lora hashes": ", ".join(f"{x['name']}: {x['hash']}" for x in loras) or None,  # as A1111 writes it
        "Version": f"Diffusion Studio (diffusers {(meta.get('versions') or {}).get('diffusers', '?')})",
    }
    body = ", ".join(f"{k}: {_quote(v)}" for k, v in pairs.items() if v is not None)
    tags = " ".join(f"<lora:{x['name']}:{x['scale']:g}>" for x in loras)  # A1111 keeps them in the prompt
    lines = [" ".join(filter(None, (meta.get("prompt") or "", tags)))]
    if meta.get("negative_prompt"):
        lines.append(f"Negative prompt: {meta['negative_prompt']}")
    return "\n".join([*lines, body])


# a key of at most 64 characters keeps findall linear on a long line that is not `Key: value` pairs
_PAIR = re.compile(r'\s*([\w /+-]{1,64}):\s*("(?:\\.|[^"\\])*+"|[^,]*)(?:,|$)')
_NUMBERS = {"Steps": ("steps", int), "CFG scale": ("guidance", float), "Seed": ("seed", int)}


def parse_parameters(text: str) -> dict[str, Any]:
    """AUTOMATIC1111's `parameters` text as run-log column names (what it names; the rest is left out)."""
    lines = text.strip().split("\n")
    pairs: dict[str, str] = {}
    if len(lines) > 1 and len(_PAIR.findall(lines[-1])) >= 2:
        for key, value in _PAIR.findall(lines.pop()):
            try:
                pairs[key.strip()] = checks.parse_json(key, value) if value.startswith('"') else value.strip()
            except ValidationError:
                continue  # a quoted value that is not a JSON string (a bad escape): the studio cannot use it
    negative = [i for i, line in enumerate(lines) if line.startswith("Negative prompt:")]
    cut = negative[0] if negative else len(lines)
    prompt, tagged = loras_in_prompt("\n".join(lines[:cut]).strip())
    meta: dict[str, Any] = {"prompt": prompt}
    if tagged:  # A1111's LoRAs: by name, found again in this studio's LoRA folders when the form is run
        meta["loras"] = [{"name": ref.source, "scale": ref.scale} for ref in tagged]
    if negative:
        meta["negative_prompt"] = "\n".join(lines[cut:]).removeprefix("Negative prompt:").strip()
    for key, (column, kind) in _NUMBERS.items():
        if key in pairs:
            try:
                meta[column] = kind(pairs[key])
            except ValueError:
                continue  # a value this studio cannot use (e.g. "Seed: -1") leaves the form's own
    size = re.fullmatch(r"(\d{1,6})x(\d{1,6})", str(pairs.get("Size", "")))
    if size:
        meta["width"], meta["height"] = int(size[1]), int(size[2])
    by_sampler = {v: k for k, v in A1111_SAMPLERS.items()}
    if pairs.get("Sampler") in by_sampler:
        meta["scheduler"] = by_sampler[pairs["Sampler"]]
    if "Model" in pairs:  # a checkpoint's file name in that tool, not a model this studio can load
        meta["other_tool_model"] = pairs["Model"]
    return meta
