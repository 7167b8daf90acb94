"""How much an image changed against the baseline, and how much of the prompt it shows (by the model's judge).

Images are float arrays in [0, 1], shape (H, W, C). SSIM follows Wang et al. (2004)
with a 7x7 uniform window on the luma channel, like scikit-image's default.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

IDENTICAL_PSNR = float("inf")


def max_abs_diff(a: np.ndarray, b: np.ndarray) -> float:
    """Largest per-pixel difference, on the 0-1 scale."""
    return float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64))))


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    """Peak signal-to-noise ratio in dB (inf for identical images)."""
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return IDENTICAL_PSNR if mse == 0 else 10 * math.log10(1.0 / mse)


def _luma(img: np.ndarray) -> np.ndarray:
    img = img.astype(np.float64)
    if img.ndim == 3 and img.shape[-1] >= 3:
        return img[..., 0] * 0.299 + img[..., 1] * 0.587 + img[..., 2] * 0.114
    return img.reshape(img.shape[:2])


def _box_mean(x: np.ndarray, size: int) -> np.ndarray:
    """Mean over every size x size window (valid positions only), via integral images."""
    c = np.pad(x, ((1, 0), (1, 0))).cumsum(0).cumsum(1)
    s = c[size:, size:] - c[:-size, size:] - c[size:, :-size] + c[:-size, :-size]
    return s / (size * size)


def ssim(a: np.ndarray, b: np.ndarray, window: int = 7) -> float:
    """Structural similarity of the luma channels, 1.0 for identical images."""
    x, y = _luma(a), _luma(b)
    window = min(window, *x.shape)
    c1, c2 = 0.01**2, 0.03**2
    mx, my = _box_mean(x, window), _box_mean(y, window)
    n = window * window
    cov = n / (n - 1)
    vx = (_box_mean(x * x, window) - mx * mx) * cov
    vy = (_box_mean(y * y, window) - my * my) * cov
    vxy = (_box_mean(x * y, window) - mx * my) * cov
    s = ((2 * mx * my + c1) * (2 * vxy + c2)) / ((mx**2 + my**2 + c1) * (vx + vy + c2))
    return float(s.mean())


def compare(image: np.ndarray, baseline: np.ndarray) -> dict[str, float]:
    """All the difference measures of `image` against `baseline`."""
    if image.shape != baseline.shape:
        raise ValueError(f"cannot compare images of shapes {image.shape} and {baseline.shape}")
    return {
        "max_abs_diff": max_abs_diff(image, baseline),
        "psnr": psnr(image, baseline),
        "ssim": ssim(image, baseline),
    }


def prompt_fidelity(image: np.ndarray, prompt: str, judge: Callable[..., Any]) -> dict[str, Any] | None:
    """How much of `prompt` the image shows, by the model's own judge (its spec's `prompt_fidelity` hook)."""
    from PIL import Image

    pil = Image.fromarray((np.clip(image, 0, 1) * 255).round().astype(np.uint8))
    return judge(pil, prompt)
