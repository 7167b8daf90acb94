"""A deterministic judge of tiny-shapes images: what is drawn, and does it match the prompt?

No learned model: the background colour is the median of the border, the foreground is what
differs from it (largest connected blob), the colour is the nearest palette hue of the
foreground, the shape comes from geometry (fill ratio of the bounding box, solidity against
the convex hull, how much wider the bottom is than the top), the position is the nearest
anchor to the centroid and the size is the extent of the blob.

    >>> fidelity(image, "a big red circle on the left, on a white background")["score"]
"""

from __future__ import annotations

import colorsys
import re
from collections import deque

import numpy as np
from PIL import Image

from .dataset import ATTRIBUTES, BACKGROUNDS, COLOURS, POSITION_PHRASES, POSITIONS, SHAPES, SIZES

SIZE_THRESHOLD = 21.0  # blob extent in pixels between small (~15) and big (~26)
MIN_BLOB = 6  # pixels; anything smaller is "nothing drawn"
_HUES = {name: colorsys.rgb_to_hsv(*(c / 255 for c in rgb))[0] for name, rgb in COLOURS.items()}


def parse_prompt(prompt: str) -> dict[str, str | None]:
    """The attributes a prompt asks for; None where the prompt does not say.

    Args:
        prompt: text in the tiny-shapes language, e.g. "a small blue star at the top".

    Returns:
        A dict with keys shape, colour, background, position, size.
    """
    text = prompt.lower().replace("center", "centre").replace("gray", "grey")
    words = re.findall(r"[a-z]+", text)
    attrs: dict[str, str | None] = dict.fromkeys(ATTRIBUTES)
    attrs["shape"] = next((w for w in words if w in SHAPES), None)
    attrs["size"] = next((w for w in words if w in SIZES), None)
    attrs["position"] = next((p for p, ph in POSITION_PHRASES.items() if ph in text), None)
    bg = re.search(r"on an? (\w+) background", text)
    attrs["background"] = bg.group(1) if bg and bg.group(1) in BACKGROUNDS else None
    bg_word = attrs["background"]
    colours = [w for w in words if w in COLOURS]
    attrs["colour"] = colours[0] if colours else None
    if bg_word in COLOURS and len(colours) == 1:
        attrs["colour"] = None
    return attrs


def foreground_mask(arr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(boolean mask of the largest blob that differs from the background, background RGB)."""
    border = np.concatenate([arr[:2].reshape(-1, 3), arr[-2:].reshape(-1, 3),
                             arr[:, :2].reshape(-1, 3), arr[:, -2:].reshape(-1, 3)])
    bg = np.median(border, axis=0)
    diff = np.abs(arr - bg).max(axis=2)
    threshold = max(30.0, 0.5 * float(np.percentile(diff, 99.5)))
    return largest_component(diff > threshold), bg


def largest_component(mask: np.ndarray) -> np.ndarray:
    """Keep only the largest 4-connected component of a boolean mask."""
    labels = np.zeros(mask.shape, dtype=np.int32)
    best, best_size, current = 0, 0, 0
    for y, x in zip(*np.nonzero(mask), strict=True):
        if labels[y, x]:
            continue
        current += 1
        size = _flood(mask, labels, (int(y), int(x)), current)
        if size > best_size:
            best, best_size = current, size
    return labels == best if best else np.zeros_like(mask)


def _flood(mask: np.ndarray, labels: np.ndarray, start: tuple[int, int], label: int) -> int:
    h, w = mask.shape
    queue, size = deque([start]), 0
    labels[start] = label
    while queue:
        y, x = queue.popleft()
        size += 1
        for ny, nx in ((y - 1, x), (y + 1, x), (y, x - 1), (y, x + 1)):
            if 0 <= ny < h and 0 <= nx < w and mask[ny, nx] and not labels[ny, nx]:
                labels[ny, nx] = label
                queue.append((ny, nx))
    return size


def hull_area(points: np.ndarray) -> float:
    """Area of the convex hull of pixel centres, grown by half a pixel (Pick-style)."""
    pts = sorted(set(map(tuple, points.tolist())))
    if len(pts) < 3:
        return float(len(pts))

    def half(seq: list) -> list:
        out: list = []
        for p in seq:
            while len(out) >= 2 and _cross(out[-2], out[-1], p) <= 0:
                out.pop()
            out.append(p)
        return out

    hull = half(pts)[:-1] + half(pts[::-1])[:-1]
    xy = np.array(hull, dtype=float)
    area = 0.5 * abs(np.dot(xy[:, 0], np.roll(xy[:, 1], 1)) - np.dot(xy[:, 1], np.roll(xy[:, 0], 1)))
    perimeter = np.linalg.norm(xy - np.roll(xy, 1, axis=0), axis=1).sum()
    return float(area + perimeter / 2 + 1)


def _cross(o: tuple, a: tuple, b: tuple) -> float:
    return (a[0] - o[0]) * (b[1] - o[1]) - (a[1] - o[1]) * (b[0] - o[0])


def shape_features(mask: np.ndarray) -> dict[str, float]:
    """Geometry of a blob: area, bbox extent, fill ratio, solidity, bottom/top width ratio."""
    ys, xs = np.nonzero(mask)
    h, w = ys.max() - ys.min() + 1, xs.max() - xs.min() + 1
    area = float(len(ys))
    rows = mask[ys.min(): ys.max() + 1].sum(axis=1).astype(float)
    third = max(1, len(rows) // 3)
    taper = (rows[-third:].mean() + 1) / (rows[:third].mean() + 1)
    return {
        "area": area,
        "extent": float(max(h, w)),
        "fill": area / float(h * w),
        "solidity": area / hull_area(np.stack([ys, xs], axis=1)),
        "taper": float(taper),
        "cy": float(ys.mean()),
        "cx": float(xs.mean()),
    }


def classify_shape(f: dict[str, float]) -> str:
    """Shape from geometry: stars are concave, squares fill their box, triangles taper."""
    if f["solidity"] < 0.78:
        return "star"
    if f["fill"] > 0.88:
        return "square"
    if f["taper"] > 1.9 or f["fill"] < 0.63:
        return "triangle"
    return "circle"


def classify_colour(arr: np.ndarray, mask: np.ndarray) -> str | None:
    """Nearest palette hue to the saturation-weighted mean hue of the foreground."""
    pix = arr[mask] / 255.0
    hsv = np.array([colorsys.rgb_to_hsv(*p) for p in pix])
    weight = hsv[:, 1] * hsv[:, 2]
    if weight.sum() < 1e-6:
        return None
    angle = 2 * np.pi * hsv[:, 0]
    mean = np.arctan2((weight * np.sin(angle)).sum(), (weight * np.cos(angle)).sum())
    hue = (mean / (2 * np.pi)) % 1.0
    return min(_HUES, key=lambda n: min(abs(hue - _HUES[n]), 1 - abs(hue - _HUES[n])))


def analyze(image: Image.Image) -> dict[str, str | None]:
    """What the image shows: shape, colour, background, position, size (None if nothing drawn)."""
    arr = np.asarray(image.convert("RGB").resize((64, 64), Image.Resampling.BOX), dtype=np.float64)
    mask, bg = foreground_mask(arr)
    background = min(BACKGROUNDS, key=lambda n: float(np.abs(np.array(BACKGROUNDS[n]) - bg).sum()))
    if mask.sum() < MIN_BLOB:
        return {"shape": None, "colour": None, "background": background, "position": None, "size": None}
    f = shape_features(mask)
    position = min(POSITIONS, key=lambda p: (POSITIONS[p][0] - f["cx"]) ** 2 + (POSITIONS[p][1] - f["cy"]) ** 2)
    return {
        "shape": classify_shape(f),
        "colour": classify_colour(arr, mask),
        "background": background,
        "position": position,
        "size": "big" if f["extent"] > SIZE_THRESHOLD else "small",
    }


def fidelity(image: Image.Image, prompt: str) -> dict:
    """How well ``image`` matches ``prompt``, attribute by attribute.

    Args:
        image: a generated (or drawn) image, any size; it is judged at 64x64.
        prompt: the prompt it was made from.

    Returns:
        {"expected": {...}, "detected": {...}, "correct": {attribute: bool} for the attributes
        the prompt names, "score": fraction correct (None when the prompt names none)}.
    """
    expected = parse_prompt(prompt)
    detected = analyze(image)
    correct = {k: detected[k] == v for k, v in expected.items() if v is not None}
    score = sum(correct.values()) / len(correct) if correct else None
    return {"expected": expected, "detected": detected, "correct": correct, "score": score}
