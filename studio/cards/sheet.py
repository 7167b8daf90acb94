"""The contact sheet: for each model of a card, its baseline's image and its winners' side by side, each
with a caption (what it is, the configuration, its figures), one row per model."""

from __future__ import annotations

import textwrap
from typing import Any

from PIL import Image, ImageDraw, ImageFont

TILE = 192  # pixels per image side on the sheet
PAD = 12
LINE = 13  # caption line height
CAPTION_LINES = 5
CHARS = 30  # caption characters per line
BACKGROUND, INK, TITLE_INK = (255, 255, 255), (30, 30, 30), (0, 0, 0)


def _tile(image: Image.Image) -> Image.Image:
    """`image` fitted into a TILE square: small images grow by whole pixels (NEAREST), large ones shrink."""
    image = image.convert("RGB")
    scale = TILE / max(image.size)
    size = (max(1, round(image.width * scale)), max(1, round(image.height * scale)))
    resample = Image.Resampling.NEAREST if scale >= 1 else Image.Resampling.LANCZOS
    return image.resize(size, resample)


ASCII = str.maketrans({"×": "x", "–": "-", "…": "..."})  # the built-in font has no glyph for these


def _caption(lines: list[str]) -> list[str]:
    lines = [line.translate(ASCII) for line in lines]
    wrapped = [part for line in lines for part in textwrap.wrap(line, CHARS, break_on_hyphens=False) or [""]]
    if len(wrapped) > CAPTION_LINES:
        wrapped = wrapped[: CAPTION_LINES - 1] + [wrapped[CAPTION_LINES - 1][: CHARS - 3] + "..."]
    return wrapped


def contact_sheet(runs: list[Any]) -> Image.Image:
    """One PNG-ready image: a row per model run (`studio.cards.run_suite.ModelRun`: its `case` and its
    `images`, (caption lines, image) pairs, baseline first)."""
    font = ImageFont.load_default()
    columns = max((len(r.images) for r in runs), default=1) or 1
    row_height = LINE + PAD + TILE + PAD + CAPTION_LINES * LINE + PAD
    sheet = Image.new("RGB", (PAD + columns * (TILE + PAD), PAD + max(1, len(runs)) * row_height), BACKGROUND)
    draw = ImageDraw.Draw(sheet)
    for row, run in enumerate(runs):
        top = PAD + row * row_height
        draw.text((PAD, top), run.case.shape.translate(ASCII), fill=TITLE_INK, font=font)
        if not run.images:
            draw.text((PAD, top + LINE + PAD), "no image: nothing ran", fill=INK, font=font)
        for column, (lines, image) in enumerate(run.images):
            left = PAD + column * (TILE + PAD)
            tile = _tile(image)
            sheet.paste(tile, (left + (TILE - tile.width) // 2, top + LINE + PAD + (TILE - tile.height) // 2))
            for i, line in enumerate(_caption(lines)):
                draw.text((left, top + LINE + 2 * PAD + TILE + i * LINE), line, fill=INK, font=font)
    return sheet
