"""Hostile files, built byte by byte: the PNGs, .safetensors checkpoints and databases a user may hand the
studio. Each builder writes one file and returns its path; nothing here needs the model."""

from __future__ import annotations

import json
import pickle
import sqlite3
import struct
import zlib
from pathlib import Path

import torch
from safetensors.torch import save_file

from pipelines.registry import ASSETS

PROMPT = "a small red star on the right, on a black background"
VAE_FILE = ASSETS / "tiny-shapes" / "vae" / "diffusion_pytorch_model.safetensors"
BOMB_SIDE = 40_000  # 1.6 billion pixels: Pillow refuses over 179 million (2 x Image.MAX_IMAGE_PIXELS)


def chunk(kind: bytes, data: bytes) -> bytes:
    """One PNG chunk: length, type, data, CRC."""
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def text(key: str, value: str | bytes, kind: bytes = b"tEXt") -> bytes:
    """A tEXt chunk, or a zTXt one (`kind=b"zTXt"`) holding `value` compressed."""
    raw = value.encode("latin-1") if isinstance(value, str) else value
    body = raw if kind == b"tEXt" else b"\0" + zlib.compress(raw, 9)
    return chunk(kind, key.encode() + b"\0" + body)


def png(path: Path, *texts: bytes, side: int = 8, bits: int = 8) -> Path:
    """A grey PNG of `side` x `side` black pixels (1-bit ones for a bomb: a few hundred kB of zeros that
    decode to gigabytes) carrying the text chunks `texts`."""
    row = b"\0" * (1 + (side * bits + 7) // 8)  # filter byte + one row
    squeeze = zlib.compressobj(9)
    pixels = b"".join(squeeze.compress(row) for _ in range(side)) + squeeze.flush()
    header = chunk(b"IHDR", struct.pack(">IIBBBBB", side, side, bits, 0, 0, 0, 0))
    body = b"\x89PNG\r\n\x1a\n" + header + b"".join(texts) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")
    path.write_bytes(body)
    return path


def studio_json(**columns) -> str:
    """The studio's `diffusion-studio` JSON for a tiny-shapes run, with `columns` over its values."""
    meta = {"format": 1, "run_id": 7, "config": "baseline", "model": "tiny-shapes", "prompt": PROMPT}
    meta.update(steps=2, width=64, height=64, seed=3, guidance=6.0, scheduler="default", requested=[])
    return json.dumps({**meta, **columns})


def bomb_png(folder: Path) -> Path:
    """40,000 x 40,000 pixels in ~200 kB that carry a real run's settings: reading them must not decode."""
    return png(folder / "bomb.png", text("diffusion-studio", studio_json()), side=BOMB_SIDE, bits=1)


def truncated_png(folder: Path) -> Path:
    """A PNG cut inside its pixel data, before any settings it would carry after them."""
    whole = png(folder / "whole.png", side=256).read_bytes()
    path = folder / "truncated.png"
    path.write_bytes(whole[: len(whole) // 2])
    return path


def not_an_image(folder: Path) -> Path:
    path = folder / "notes.png"
    path.write_text("shopping list: eggs, flour, and not a single pixel\n")
    return path


def huge_text_png(folder: Path) -> Path:
    """A `parameters` chunk of 5 MB."""
    return png(folder / "huge-text.png", text("parameters", "a cat, " * 750_000 + "\nSteps: 20, Seed: 1"))


def zlib_bomb_png(folder: Path) -> Path:
    """A compressed `parameters` chunk of ~50 kB that inflates to 50 MB."""
    return png(folder / "zlib-bomb.png", text("parameters", b" " * 50_000_000, kind=b"zTXt"))


def deep_json_png(folder: Path) -> Path:
    """The studio's JSON chunk nested 30,000 arrays deep (60 kB)."""
    return png(folder / "deep.png", text("diffusion-studio", "[" * 30_000 + "]" * 30_000))


def outside_png(folder: Path) -> Path:
    """The studio's JSON naming a model file outside the allowed roots, a pickle VAE and 10^9 steps."""
    meta = studio_json(model="/etc/passwd.safetensors", vae="/root/vae.ckpt", steps=10**9, width=10**6)
    return png(folder / "outside.png", text("diffusion-studio", meta))


def broken_a1111_png(folder: Path) -> Path:
    """Another tool's `parameters` with a bad JSON escape and a 5,000-digit size (both crashed the reader)."""
    line = f'Steps: 20, Model: "\\q", Size: {"9" * 5000}x64, Seed: {"1" * 5000}, Sampler: Euler a'
    return png(folder / "a1111.png", text("parameters", f"a cat\n{line}"))


def header_file(path: Path, header: bytes, length: int | None = None, data: bytes = b"") -> Path:
    """A .safetensors-shaped file: an 8-byte length (the header's own unless `length` lies), header, data."""
    size = len(header) if length is None else length
    path.write_bytes(struct.pack("<Q", size) + header + data)
    return path


def checkpoint(folder: Path, name: str = "model.safetensors") -> Path:
    """A small, valid original-layout checkpoint (one UNet tensor): what the hostile ones start from."""
    path = folder / name
    save_file({"model.diffusion_model.input_blocks.0.0.weight": torch.zeros(4, 4)}, path)
    return path


def lying_length(folder: Path) -> Path:
    """A header length of 10^12 bytes in a file of a few hundred."""
    header = json.dumps({"model.diffusion_model.w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})
    return header_file(folder / "lying-length.safetensors", header.encode(), length=10**12, data=b"\0" * 4)


def offsets_past_end(folder: Path) -> Path:
    """A tensor that claims a gigabyte of data in a file with 16 bytes of it."""
    entry = {"dtype": "F32", "shape": [2**28], "data_offsets": [0, 2**30]}
    header = json.dumps({"model.diffusion_model.w": entry}).encode()
    return header_file(folder / "offsets.safetensors", header, data=b"\0" * 16)


def header_not_json(folder: Path) -> Path:
    return header_file(folder / "not-json.safetensors", b"\xff\xfe{this is not json" + b" " * 64)


def deep_header(folder: Path) -> Path:
    return header_file(folder / "deep.safetensors", b"[" * 100_000 + b"]" * 100_000)


def truncated_checkpoint(folder: Path, source: Path = VAE_FILE, name: str = "cut.safetensors") -> Path:
    """A real weights file (the bundled VAE's, 3.8 MB) cut in half, as an interrupted download leaves it."""
    raw = source.read_bytes()
    path = folder / name
    path.write_bytes(raw[: len(raw) // 2])
    return path


def pickle_renamed(folder: Path, zipped: bool = True) -> Path:
    """A PyTorch checkpoint (`torch.save`'s zip, or a bare pickle) renamed .safetensors."""
    path = folder / ("zip-pickle.safetensors" if zipped else "pickle.safetensors")
    if zipped:
        torch.save({"state_dict": {}}, path)
    else:
        path.write_bytes(pickle.dumps({"state_dict": {}}, protocol=4))
    return path


def not_sqlite(folder: Path) -> Path:
    path = folder / "notes.db"
    path.write_text("these are my notes, not a database\n" * 100)
    return path


def foreign_sqlite(folder: Path) -> Path:
    """Another program's SQLite database (a contacts list)."""
    path = folder / "contacts.db"
    with sqlite3.connect(path) as conn:
        conn.execute("create table contacts (name text, phone text)")
        conn.execute("insert into contacts values ('Ada', '555-0100')")
    conn.close()
    return path


def damaged_copy(db: Path, folder: Path) -> Path:
    """A copy of the run log at `db` (its WAL folded in) with pages past the first overwritten."""
    path = folder / "damaged.db"
    with sqlite3.connect(db) as src, sqlite3.connect(path) as dst:
        src.backup(dst)
    src.close()
    dst.close()
    raw = bytearray(path.read_bytes())
    raw[4096:] = b"\xa5" * (len(raw) - 4096)
    path.write_bytes(bytes(raw))
    return path
