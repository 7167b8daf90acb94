"""One PNG with the image of every measured configuration (techniques and ladder rungs, per model), each
captioned with its configuration and latency: the runner may bring back only a few files.

The random-weight architectures draw noise; their images show that a configuration produced finite pixels and,
side by side with the baseline, whether it changed them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from PIL import Image, ImageDraw

TILE = 160
COLUMNS = 8
CAPTION = 26
TITLE = 22
PAD = 6


def groups(data: dict[str, Any]) -> list[tuple[str, list[tuple[str, str]]]]:
    """(title, [(caption, image path)]) for every section with images, in the report's order."""
    found = []
    for key in ("techniques", "ladder"):
        for role, section in (data.get(key) or {}).items():
            tiles = []
            for row in section.get("rows", []):
                if row.get("status") == "ok" and row.get("image_path") and Path(row["image_path"]).is_file():
                    name = row.get("step") or row.get("technique") or row["config"]
                    latency = row.get("latency_s")
                    tiles.append((f"{name}\n{latency:.3f} s" if latency else name, row["image_path"]))
            if tiles:
                found.append(
                    (f"{key}: {section['model']} {section['side']}x{section['side']} ({role})", tiles)
                )
    return found


def _tile(path: str) -> Image.Image:
    with Image.open(path) as img:
        img = img.convert("RGB")
        scale = TILE / max(img.size)
        size = (max(1, round(img.width * scale)), max(1, round(img.height * scale)))
        return img.resize(size, Image.NEAREST if scale > 1 else Image.LANCZOS)


def sheet(data: dict[str, Any], path: Path) -> Path | None:
    """Draw the contact sheet to `path`; None (and no file) when no image was measured."""
    found = groups(data)
    if not found:
        return None
    cell_w, cell_h = TILE + PAD, TILE + CAPTION + PAD
    rows = sum(TITLE + -(-len(tiles) // COLUMNS) * cell_h for _, tiles in found)
    canvas = Image.new("RGB", (COLUMNS * cell_w + PAD, rows + PAD), "white")
    draw = ImageDraw.Draw(canvas)
    y = PAD
    for title, tiles in found:
        draw.text((PAD, y + 4), title, fill="black")
        y += TITLE
        for i, (caption, image) in enumerate(tiles):
            x, row_y = PAD + (i % COLUMNS) * cell_w, y + (i // COLUMNS) * cell_h
            canvas.paste(_tile(image), (x, row_y))
            draw.multiline_text((x, row_y + TILE + 1), caption[:60], fill="black", spacing=1)
        y += -(-len(tiles) // COLUMNS) * cell_h
    canvas.save(path, optimize=True)
    return path
