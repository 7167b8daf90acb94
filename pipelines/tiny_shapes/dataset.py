"""Procedural dataset: coloured shapes on plain backgrounds, with their prompts.

Every image is drawn from a :class:`ShapeSpec` (shape, colour, background, position,
size plus a little jitter) with PIL, 4x supersampled then box-filtered to 64x64 so
edges are anti-aliased. Everything is seeded: the same seed gives the same images.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageDraw

IMAGE_SIZE = 64
SUPERSAMPLE = 4

SHAPES: tuple[str, ...] = ("circle", "square", "triangle", "star")
COLOURS: dict[str, tuple[int, int, int]] = {
    "red": (225, 35, 35),
    "yellow": (240, 205, 25),
    "green": (35, 175, 55),
    "cyan": (25, 195, 215),
    "blue": (35, 75, 225),
    "purple": (155, 45, 215),
}
BACKGROUNDS: dict[str, tuple[int, int, int]] = {
    "white": (245, 245, 245),
    "black": (15, 15, 15),
    "grey": (128, 128, 128),
}
POSITIONS: dict[str, tuple[int, int]] = {
    "left": (17, 32),
    "right": (47, 32),
    "top": (32, 17),
    "bottom": (32, 47),
    "centre": (32, 32),
}
POSITION_PHRASES: dict[str, str] = {
    "left": "on the left",
    "right": "on the right",
    "top": "at the top",
    "bottom": "at the bottom",
    "centre": "in the centre",
}
SIZES: dict[str, float] = {"small": 8.0, "big": 13.5}
POSITION_JITTER = 3
RADIUS_JITTER = 1.0
STAR_INNER_RATIO = 0.45

ATTRIBUTES = ("shape", "colour", "background", "position", "size")


@dataclass(frozen=True)
class ShapeSpec:
    """One drawable scene: the prompt attributes plus the exact geometry."""

    shape: str
    colour: str
    background: str
    position: str
    size: str
    cx: float
    cy: float
    radius: float

    def prompt(self) -> str:
        """The canonical prompt, e.g. 'a big red circle on the left, on a white background'."""
        return make_prompt(self.shape, self.colour, self.background, self.position, self.size)

    def attributes(self) -> dict[str, str]:
        """The five prompt attributes as a dict."""
        return {name: getattr(self, name) for name in ATTRIBUTES}


def make_prompt(
    shape: str,
    colour: str,
    background: str | None = None,
    position: str | None = None,
    size: str | None = None,
) -> str:
    """Build a prompt in the model's language; omitted attributes are left out of the text."""
    words = ["a"] + ([size] if size else []) + [colour, shape]
    text = " ".join(words)
    if position:
        text += " " + POSITION_PHRASES[position]
    if background:
        text += f", on a {background} background"
    return text


def spec_from_attributes(attrs: dict[str, str], rng: random.Random | None = None) -> ShapeSpec:
    """Place a scene for the given attributes, with jitter drawn from ``rng`` (none if None)."""
    ax, ay = POSITIONS[attrs["position"]]
    radius = SIZES[attrs["size"]]
    if rng is not None:
        ax += rng.uniform(-POSITION_JITTER, POSITION_JITTER)
        ay += rng.uniform(-POSITION_JITTER, POSITION_JITTER)
        radius += rng.uniform(-RADIUS_JITTER, RADIUS_JITTER)
    return ShapeSpec(cx=ax, cy=ay, radius=radius, **{k: attrs[k] for k in ATTRIBUTES})


def random_attributes(rng: random.Random) -> dict[str, str]:
    """Draw the five attributes uniformly."""
    return {
        "shape": rng.choice(SHAPES),
        "colour": rng.choice(list(COLOURS)),
        "background": rng.choice(list(BACKGROUNDS)),
        "position": rng.choice(list(POSITIONS)),
        "size": rng.choice(list(SIZES)),
    }


def random_spec(rng: random.Random) -> ShapeSpec:
    """A uniformly random scene with jitter."""
    return spec_from_attributes(random_attributes(rng), rng)


def shape_polygon(shape: str, cx: float, cy: float, radius: float) -> list[tuple[float, float]]:
    """Vertices of a polygonal shape (square, triangle, star) centred on its centroid."""
    if shape == "square":
        h = radius * 0.88
        return [(cx - h, cy - h), (cx + h, cy - h), (cx + h, cy + h), (cx - h, cy + h)]
    if shape == "triangle":
        r = radius * 1.18
        return [_polar(cx, cy, r, -90 + 120 * k) for k in range(3)]
    if shape == "star":
        r = radius * 1.1
        return [_polar(cx, cy, r if k % 2 == 0 else r * STAR_INNER_RATIO, -90 + 36 * k) for k in range(10)]
    raise ValueError(f"Unknown polygonal shape {shape!r}; use one of square, triangle, star.")


def _polar(cx: float, cy: float, r: float, degrees: float) -> tuple[float, float]:
    rad = math.radians(degrees)
    return (cx + r * math.cos(rad), cy + r * math.sin(rad))


def render(spec: ShapeSpec) -> Image.Image:
    """Draw the scene as a 64x64 RGB image."""
    s = SUPERSAMPLE
    big = Image.new("RGB", (IMAGE_SIZE * s, IMAGE_SIZE * s), BACKGROUNDS[spec.background])
    draw = ImageDraw.Draw(big)
    fill = COLOURS[spec.colour]
    cx, cy, r = spec.cx * s, spec.cy * s, spec.radius * s
    if spec.shape == "circle":
        draw.ellipse((cx - r, cy - r, cx + r, cy + r), fill=fill)
    else:
        draw.polygon(shape_polygon(spec.shape, cx, cy, r), fill=fill)
    return big.resize((IMAGE_SIZE, IMAGE_SIZE), Image.Resampling.BOX)


def make_specs(count: int, seed: int) -> list[ShapeSpec]:
    """``count`` random scenes from a seeded generator."""
    rng = random.Random(seed)
    return [random_spec(rng) for _ in range(count)]


def render_array(specs: list[ShapeSpec]) -> np.ndarray:
    """Render scenes to a uint8 array of shape (N, 64, 64, 3)."""
    return np.stack([np.asarray(render(spec)) for spec in specs])


def training_prompt(spec: ShapeSpec, rng: random.Random, drop: float = 0.1) -> str:
    """A prompt for training: attributes are sometimes omitted, 'center' sometimes spelled so.

    Omitting size, position or background now and then teaches the model to fill
    them in itself, so short prompts such as 'a red star' still draw something.
    """
    text = make_prompt(
        spec.shape,
        spec.colour,
        None if rng.random() < drop else spec.background,
        None if rng.random() < drop else spec.position,
        None if rng.random() < drop else spec.size,
    )
    if rng.random() < 0.3:
        text = text.replace("centre", "center")
    return text
