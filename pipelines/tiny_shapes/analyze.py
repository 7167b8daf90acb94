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
    border = np.concatenate(
        [
            arr[:2].reshape(-1, 3),
            arr[-2:].reshape(-1, 3),
            arr[:, :2].reshape(-1, 3),
            arr[:, -2:].reshape(-1, 3),
        ]
    )
    mid = len(border) // 2  # the border has an even number of pixels: its median is a mean of two
    ordered = np.sort(border, axis=0)
    bg = (ordered[mid - 1] + ordered[mid]) / 2
    dist = arr - bg
    np.abs(dist, out=dist)
    diff = np.maximum(np.maximum(dist[..., 0], dist[..., 1]), dist[..., 2])
    threshold = max(30.0, 0.5 * _percentile(diff, 99.5))
    return largest_component(diff > threshold), bg


def _percentile(values: np.ndarray, q: float) -> float:
    """``np.percentile(values, q)`` (linear interpolation) without its per-call overhead."""
    flat = values.ravel()
    pos = (flat.size - 1) * (q / 100)
    k = int(pos)
    t = pos - k
    ks = [k, min(k + 1, flat.size - 1)]
    lo, hi = np.partition(flat, ks)[ks].tolist()
    return hi - (hi - lo) * (1 - t) if t >= 0.5 else lo + (hi - lo) * t


def largest_component(mask: np.ndarray) -> np.ndarray:
    """Keep only the largest 4-connected component of a boolean mask.

    Horizontal runs of the mask are numbered in raster order and joined by a union-find (with
    path halving) over vertical contacts, each root being the lowest-numbered run of its
    component. Ties in size go to the component that starts first in raster order.
    """
    fg = np.asarray(mask, dtype=bool)
    starts = fg.copy()
    starts[:, 1:] &= ~fg[:, :-1]
    run = np.cumsum(starts).reshape(fg.shape)
    n_runs = np.count_nonzero(starts)
    if not n_runs:
        return np.zeros_like(mask)
    touch = fg[:-1] & fg[1:]
    touch[:, 1:] &= ~touch[:, :-1]  # one contact per pair of runs: where their overlap begins
    parent = list(range(n_runs + 1))
    for upper, lower in zip(run[:-1][touch].tolist(), run[1:][touch].tolist(), strict=True):
        while parent[upper] != upper:
            parent[upper] = parent[parent[upper]]
            upper = parent[upper]
        while parent[lower] != lower:
            parent[lower] = parent[parent[lower]]
            lower = parent[lower]
        parent[max(upper, lower)] = min(upper, lower)
    for i in range(n_runs + 1):  # parents are lower-numbered, so one pass reaches every root
        parent[i] = parent[parent[i]]
    component = np.array(parent)[run]
    component[~fg] = 0
    return component == np.bincount(component.ravel())[1:].argmax() + 1


def hull_area(points: np.ndarray) -> float:
    """Area of the convex hull of pixel centres, grown by half a pixel (Pick-style)."""
    pts = np.asarray(points).reshape(-1, 2)
    pts = pts[np.lexsort((pts[:, 1], pts[:, 0]))]
    distinct = np.ones(len(pts), dtype=bool)
    distinct[1:] = (pts[1:, 0] != pts[:-1, 0]) | (pts[1:, 1] != pts[:-1, 1])
    return _sorted_hull_area(pts[distinct])


def _sorted_hull_area(pts: np.ndarray) -> float:
    """``hull_area`` of distinct points already sorted by (row, column).

    Only the first and last point of each row can be hull vertices, so the monotone chain runs
    over those few points; collinear points are dropped, which makes the hull the same as over
    all points.
    """
    if len(pts) < 3:
        return float(len(pts))
    new_row = pts[1:, 0] != pts[:-1, 0]
    ends = pts[np.concatenate([[True], new_row]) | np.concatenate([new_row, [True]])]
    ordered = list(map(tuple, ends.tolist()))
    hull = _chain(ordered)[:-1] + _chain(ordered[::-1])[:-1]
    xy = np.array(hull, dtype=float)
    prev = np.concatenate([xy[-1:], xy[:-1]])
    area = 0.5 * abs(np.dot(xy[:, 0], prev[:, 1]) - np.dot(xy[:, 1], prev[:, 0]))
    perimeter = np.linalg.norm(xy - prev, axis=1).sum()
    return float(area + perimeter / 2 + 1)


def _chain(points: list) -> list:
    """One half of Andrew's monotone chain over sorted points, keeping only strict left turns."""
    out: list = []
    for p in points:
        while len(out) >= 2:
            (oy, ox), (ay, ax) = out[-2], out[-1]
            if (ay - oy) * (p[1] - ox) - (ax - ox) * (p[0] - oy) > 0:
                break
            out.pop()
        out.append(p)
    return out


def shape_features(mask: np.ndarray) -> dict[str, float]:
    """Geometry of a blob: area, bbox extent, fill ratio, solidity, bottom/top width ratio."""
    ys, xs = np.nonzero(mask)  # in raster order: sorted by (row, column)
    top, bottom = ys.min(), ys.max()
    h, w = bottom - top + 1, xs.max() - xs.min() + 1
    area = float(len(ys))
    rows = mask[top : bottom + 1].sum(axis=1).astype(float)
    third = max(1, len(rows) // 3)
    taper = (rows[-third:].mean() + 1) / (rows[:third].mean() + 1)
    return {
        "area": area,
        "extent": float(max(h, w)),
        "fill": area / float(h * w),
        "solidity": area / _sorted_hull_area(np.stack([ys, xs], axis=1)),
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


def rgb_to_hsv(rgb: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Hue, saturation, value of an (N, 3) array of RGB in [0, 1]; ``colorsys.rgb_to_hsv`` per row."""
    r, g, b = rgb[:, 0], rgb[:, 1], rgb[:, 2]
    maxc = np.maximum(np.maximum(r, g), b)
    rangec = maxc - np.minimum(np.minimum(r, g), b)
    grey = rangec == 0
    # greys divide by 1 instead of 0: their saturation and hue come out 0, as in colorsys
    sat = rangec / (maxc + grey)
    safe_range = rangec + grey
    rc, gc, bc = (maxc - r) / safe_range, (maxc - g) / safe_range, (maxc - b) / safe_range
    hue = np.where(r == maxc, bc - gc, np.where(g == maxc, 2.0 + rc - bc, 4.0 + gc - rc))
    return (hue / 6.0) % 1.0, sat, maxc


def classify_colour(arr: np.ndarray, mask: np.ndarray) -> str | None:
    """Nearest palette hue to the saturation-weighted mean hue of the foreground."""
    hue, sat, val = rgb_to_hsv(arr[mask] / 255.0)
    weight = sat * val
    if weight.sum() < 1e-6:
        return None
    angle = 2 * np.pi * hue
    mean = np.arctan2((weight * np.sin(angle)).sum(), (weight * np.cos(angle)).sum())
    hue = (mean / (2 * np.pi)) % 1.0
    return min(_HUES, key=lambda n: min(abs(hue - _HUES[n]), 1 - abs(hue - _HUES[n])))


def analyze(image: Image.Image) -> dict[str, str | None]:
    """What the image shows: shape, colour, background, position, size (None if nothing drawn)."""
    arr = np.asarray(image.convert("RGB").resize((64, 64), Image.Resampling.BOX), dtype=np.float64)
    mask, bg = foreground_mask(arr)
    bg_rgb = bg.tolist()
    background = min(
        BACKGROUNDS, key=lambda n: sum(abs(c - b) for c, b in zip(BACKGROUNDS[n], bg_rgb, strict=True))
    )
    if np.count_nonzero(mask) < MIN_BLOB:
        return {"shape": None, "colour": None, "background": background, "position": None, "size": None}
    f = shape_features(mask)
    position = min(
        POSITIONS, key=lambda p: (POSITIONS[p][0] - f["cx"]) ** 2 + (POSITIONS[p][1] - f["cy"]) ** 2
    )
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
