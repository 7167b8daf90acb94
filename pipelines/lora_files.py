"""What a LoRA file is, read from its safetensors header alone: its layout (diffusers, PEFT or kohya names),
the model it was trained for (from its tensors' names and shapes), its rank and the modules it adapts;
AUTOMATIC1111's short hash of it; whether it fits a model; and a bounded cache of the tensors of the files
in use. How users name LoRAs (a folder name, a path, a hub id, a prompt tag) is `pipelines.loras`."""

from __future__ import annotations

import hashlib
import math
import os
import re
import threading
import time
from collections import Counter, OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file

from pipelines.errors import ValidationError
from pipelines.sources import read_header, refuse_pickle, safetensors_file

MAX_RANK = 1024
# The name endings of a LoRA's two matrices, (down, up): PEFT's, diffusers' older ones, kohya's.
PAIRS = (
    (".lora_A.weight", ".lora_B.weight"),
    (".lora.down.weight", ".lora.up.weight"),
    (".lora_linear_layer.down.weight", ".lora_linear_layer.up.weight"),
    ("_lora.down.weight", "_lora.up.weight"),  # diffusers' attention processors: attn1.processor.to_q_lora
    (".lora_down.weight", ".lora_up.weight"),
)
LYCORIS = (".hada_w1_a", ".lokr_w1", ".oft_blocks", ".oft_diag")
# What each base is called in a sentence, and the studio's model family it belongs to.
BASES = {
    "tiny-shapes": ("the bundled Tiny Shapes model", "sd"),
    "sd15": ("Stable Diffusion 1.5", "sd"),
    "sd2": ("Stable Diffusion 2", "sd"),
    "sdxl": ("SDXL", "sdxl"),
    "sd3": ("Stable Diffusion 3", "sd3"),
    "flux": ("FLUX.1", "flux"),
    "unknown": ("an unknown model", "unknown"),
}
# A UNet LoRA's cross-attention width (attn2's to_k/to_v input), or a CLIP text encoder's, -> its base.
BY_WIDTH = {64: "tiny-shapes", 768: "sd15", 1024: "sd2", 2048: "sdxl"}
CROSS_KV = re.compile(r"attn2[._](?:processor[._])?to_[kv](?:_lora)?$")
TE_PREFIXES = ("text_encoder", "lora_te", "te_", "te1_", "te2_", "base_model.model.text_model.")
SDXL_SIGNS = ("text_encoder_2.", "lora_te1_", "lora_te2_", "add_embedding", "label_emb")
FLUX_SIGNS = ("single_transformer_blocks", "double_blocks", "single_blocks")
DIT_PREFIXES = ("transformer.", "lora_transformer_", "base_model.model.transformer_blocks")
FLUX_WIDTH = 3072  # FLUX.1's hidden size; SD3-medium's is 1536, SD3.5-large's 2432
FAMILY_LABELS = {"sdxl": "SDXL", "sd3": "Stable Diffusion 3", "flux": "FLUX.1"}
SD_LABELS = {64: "Tiny Shapes", 768: "Stable Diffusion 1.5", 1024: "Stable Diffusion 2"}


@dataclass(frozen=True)
class LoraFile:
    """A LoRA file on disk, described from its header: `name` is how the studio lists it (its stem, or its
    path under a LoRA folder without the suffix), `base` what it was trained on (a key of `BASES`), `family`
    the studio's model family for that base ("unknown" when the names and shapes do not say), `rank` the
    largest rank of its modules, `layers` how many modules it adapts, `size` its bytes, `layout` "diffusers",
    "peft", "kohya" or "other" (a LoRA diffusers may still convert), `text_encoder` whether it adapts a text
    encoder too, and `cross_attention_dim` the width its UNet's cross-attention reads (None: not adapted)."""

    name: str
    path: Path
    base: str
    family: str
    rank: int
    layers: int
    size: int
    layout: str
    text_encoder: bool
    cross_attention_dim: int | None = None

    @property
    def hash(self) -> str:
        """AUTOMATIC1111's short hash of the file (`short_hash`): what its "Lora hashes:" parameter says."""
        return short_hash(self.path)


def _modules(header: dict[str, Any]) -> dict[str, tuple[list[int], list[int] | None, str]]:
    """Each adapted module's name -> (its down matrix's shape, its up matrix's shape or None, a key)."""
    found = {}
    for key, entry in header.items():
        for down, up in PAIRS:
            if key.endswith(down):
                module = key[: -len(down)]
                partner = header.get(module + up)
                found[module] = (entry["shape"], partner["shape"] if partner else None, key)
                break
    return found


def _layout(key: str) -> str:
    if key.startswith(("lora_unet_", "lora_te", "lora_transformer_")):
        return "kohya"
    if key.startswith("base_model.model."):
        return "peft"
    if key.startswith(("unet.", "transformer.", "text_encoder.", "text_encoder_2.")):
        return "diffusers"
    return "other"


def _base(modules: dict[str, tuple[list[int], list[int] | None, str]]) -> tuple[str, int | None]:
    """The model a LoRA was trained for, and its UNet's cross-attention width, from its modules' names and
    their down matrices' input widths."""
    names = list(modules)
    width = {name: math.prod(down[1:]) for name, (down, _, _) in modules.items()}
    if any(sign in name for name in names for sign in FLUX_SIGNS):
        return "flux", None
    dit = [n for n in names if n.startswith(DIT_PREFIXES) or "joint_blocks" in n]
    if dit:
        return ("flux" if any(width[n] == FLUX_WIDTH for n in dit) else "sd3"), None
    cross = Counter(width[n] for n in names if CROSS_KV.search(n)).most_common(1)
    cross_dim = cross[0][0] if cross else None
    if cross_dim in BY_WIDTH:
        return BY_WIDTH[cross_dim], cross_dim
    if any(sign in name for name in names for sign in SDXL_SIGNS):
        return "sdxl", cross_dim
    text = [width[n] for n in names if n.startswith(TE_PREFIXES) and "q_proj" in n]
    if cross_dim is None and text and text[0] in BY_WIDTH:
        return BY_WIDTH[text[0]], None
    return "unknown", cross_dim


def _refuse_rank(label: str, modules: dict[str, tuple[list[int], list[int] | None, str]]) -> None:
    """Refuse a rank past MAX_RANK or past both of its layer's widths (in and out): no training makes one. A
    rank past one width alone is wasteful but loads (a rank-128 LoRA on FLUX.1's 64-wide x_embedder)."""
    for module, (down, up, _) in modules.items():
        rank, inputs = (down[0], math.prod(down[1:])) if len(down) >= 2 else (0, 0)
        outputs = up[0] * math.prod(up[2:]) if up and len(up) >= 2 else inputs
        if not 0 < rank <= MAX_RANK or rank > max(inputs, outputs):
            raise ValidationError(
                f"LoRA {label!r} claims rank {rank} for {module[:80]!r} (down {down}, up {up}), above "
                f"{MAX_RANK} or above the layer's own widths: the file is not a usable LoRA."
            )
        if up is not None and (len(up) < 2 or up[1] != rank):
            raise ValidationError(
                f"LoRA {label!r} has an up matrix of shape {up} that does not fit its down matrix {down} for "
                f"{module[:80]!r}: the file is damaged; download or export it again."
            )


def describe(path: Path, header: dict[str, Any], name: str | None = None) -> LoraFile:
    """A LoraFile for the safetensors file at `path` whose header (`read_header`) is `header`, or
    ValidationError when it holds no LoRA weights or claims an impossible rank. Nothing but the header is
    read."""
    name = name or path.stem
    modules = _modules(header)
    if not modules:
        if any(sign in key for key in header for sign in LYCORIS):
            raise ValidationError(
                f"LoRA {name!r} is a LyCORIS LoHa/LoKr/OFT file; the studio applies LoRA files (lora_A or "
                "lora_down weights) only."
            )
        raise ValidationError(
            f"LoRA {name!r} holds no LoRA weights (no lora_A/lora_down keys): is it a full checkpoint?"
        )
    _refuse_rank(name, modules)
    base, cross = _base(modules)
    layout = Counter(_layout(key) for _, _, key in modules.values()).most_common(1)[0][0]
    return LoraFile(
        name=name,
        path=path,
        base=base,
        family=BASES[base][1],
        rank=max(down[0] for down, _, _ in modules.values()),
        layers=len(modules),
        size=path.stat().st_size,
        layout=layout,
        text_encoder=any(m.startswith(TE_PREFIXES) for m in modules),
        cross_attention_dim=cross,
    )


def inspect_lora(path: Path, name: str | None = None) -> LoraFile:
    """The LoRA file at a local `path` inside the allowed roots, described from its header; refused (a
    ValidationError, before any tensor is read) when it is a pickle, outside the roots, missing, not
    .safetensors, truncated or corrupt, holds no LoRA weights or claims an impossible rank."""
    refuse_pickle(str(path), "LoRA")
    resolved, header = safetensors_file(path, "LoRA file")
    return describe(resolved, header, name or Path(path).stem)


# AUTOMATIC1111's LoRA hash is the "addnet" hash: modules/hashes.py `addnet_hash_safetensors` (taken from
# kohya-ss sd-scripts' train_util.py) is the sha256 of the bytes after the 8-byte header length and the JSON
# header (`b.seek(n + 8)`, read in 1 MiB blocks), so editing the metadata keeps it; extensions-builtin/Lora/
# network.py `NetworkOnDisk.set_hash` keeps `shorthash = self.hash[0:12]`, which extra_networks_lora.py
# writes as "Lora hashes: name: shorthash". (A1111 takes the metadata's `sshs_model_hash`, kohya's precomputed
# copy of the same sum, when a file has one; the studio always sums the bytes themselves.)
_HASHES: dict[tuple[str, int, int], str] = {}
_HASH_LOCK = threading.Lock()


def addnet_hash(path: Path) -> str:
    """The sha256 (hex) of a safetensors file's tensor data, after its length and header: AUTOMATIC1111's and
    kohya's "addnet" hash. Kept in memory by (path, size, mtime_ns), so a replaced file is hashed again."""
    stat = os.stat(path)
    key = (str(Path(path).resolve()), stat.st_size, stat.st_mtime_ns)
    with _HASH_LOCK:
        if key in _HASHES:
            return _HASHES[key]
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        f.seek(8 + int.from_bytes(f.read(8), "little"))
        for block in iter(lambda: f.read(2**20), b""):
            digest.update(block)
    with _HASH_LOCK:
        _HASHES[key] = digest.hexdigest()
    return _HASHES[key]


def short_hash(path: Path) -> str:
    """The first 12 hex digits of `addnet_hash`: what AUTOMATIC1111 writes after a LoRA's name in an image's
    "Lora hashes:" parameter."""
    return addnet_hash(path)[:12]


def _model_label(family: str, cross_attention_dim: int | None) -> str:
    if family == "sd":
        kind = SD_LABELS.get(cross_attention_dim or 0, "Stable Diffusion")
        return f"{kind}-like" + (f" (cross-attention {cross_attention_dim})" if cross_attention_dim else "")
    return FAMILY_LABELS.get(family, family)


def fits(lora: LoraFile, family: str, cross_attention_dim: int | None = None) -> str | None:
    """None when `lora` can go on a model of `family` (and, for "sd", of that cross-attention width), else the
    sentence saying why not. A LoRA whose base is unknown, or a model of family "other", is let through:
    diffusers then says whether its names fit."""
    if lora.family == "unknown" or family not in {"sd", "sdxl", "sd3", "flux"}:
        return None
    # an SD 1.x/2.x text encoder is as wide as its UNet's cross-attention: a text-encoder-only LoRA has one
    width = lora.cross_attention_dim or next((w for w, base in BY_WIDTH.items() if base == lora.base), None)
    if lora.family == family and (family != "sd" or not width or not cross_attention_dim):
        return None
    if lora.family == family and width == cross_attention_dim:
        return None
    model = _model_label(family, cross_attention_dim)
    return (
        f"LoRA {lora.name!r} was trained for {BASES[lora.base][0]}; this model is {model}: choose a LoRA "
        "made for it."
    )


@dataclass(frozen=True)
class CacheStats:
    """What a LoraCache holds and did: its hits and misses, the files and bytes held, the seconds of its last
    read from disk, and where its last `get` came from ("disk" or "ram") and took."""

    hits: int
    misses: int
    files: int
    bytes_held: int
    budget_bytes: int
    last_read_s: float | None
    last_source: str | None
    last_get_s: float | None


class LoraCache:
    """The tensors of LoRA files kept in RAM, so switching back to a LoRA costs no disk read: at most
    `budget_bytes` of tensors (a file larger than that is read and not kept), the least recently used out
    first, keyed by (path, size, mtime_ns) so a replaced file is read again. Safe to share between threads."""

    def __init__(self, budget_bytes: int = 2**30) -> None:
        self.budget_bytes = budget_bytes
        self._files: OrderedDict[tuple[str, int, int], tuple[dict[str, torch.Tensor], int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = self.misses = 0
        self.last_read_s: float | None = None
        self.last_source: str | None = None
        self.last_get_s: float | None = None

    def get(self, lora: LoraFile) -> dict[str, torch.Tensor]:
        """The tensors of `lora`'s file (a new dict of them: change none in place), from RAM when held, else
        read from disk (its header checked again first) and kept."""
        start = time.perf_counter()
        stat = os.stat(lora.path)
        key = (str(lora.path), stat.st_size, stat.st_mtime_ns)
        with self._lock:
            held = self._files.get(key)
            if held is not None:
                self._files.move_to_end(key)
                self.hits += 1
                self.last_source, self.last_get_s = "ram", time.perf_counter() - start
                return dict(held[0])
        read_header(lora.path, "LoRA file")
        tensors = load_file(lora.path)
        size = sum(t.numel() * t.element_size() for t in tensors.values())
        with self._lock:
            self.misses += 1
            for stale in [k for k in self._files if k[0] == key[0]]:  # an older version of the same file
                self._bytes -= self._files.pop(stale)[1]
            if size <= self.budget_bytes:
                self._files[key] = (tensors, size)
                self._bytes += size
                while self._bytes > self.budget_bytes:
                    self._bytes -= self._files.popitem(last=False)[1][1]
            self.last_read_s = self.last_get_s = time.perf_counter() - start
            self.last_source = "disk"
        return dict(tensors)

    @property
    def bytes_held(self) -> int:
        """The bytes of tensors held now."""
        return self._bytes

    def stats(self) -> CacheStats:
        """A snapshot of the counters."""
        with self._lock:
            return CacheStats(
                self.hits,
                self.misses,
                len(self._files),
                self._bytes,
                self.budget_bytes,
                self.last_read_s,
                self.last_source,
                self.last_get_s,
            )

    def clear(self) -> None:
        """Let go of every file's tensors (the counters stay)."""
        with self._lock:
            self._files.clear()
            self._bytes = 0
