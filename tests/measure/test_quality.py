"""Image difference measures: they must separate identical, slightly and very different images."""

import numpy as np
import pytest

from studio.measure import quality


@pytest.fixture
def image():
    rng = np.random.default_rng(0)
    return rng.random((64, 64, 3)).astype(np.float32)


def test_identical_images(image):
    q = quality.compare(image, image.copy())
    assert q["max_abs_diff"] == 0 and q["psnr"] == float("inf") and q["ssim"] == pytest.approx(1.0)


def test_small_noise_scores_high_but_not_perfect(image):
    noisy = np.clip(image + np.random.default_rng(1).normal(0, 0.01, image.shape), 0, 1)
    q = quality.compare(noisy, image)
    assert 35 < q["psnr"] < 45
    assert 0.95 < q["ssim"] < 1.0


def test_unrelated_images_score_low(image):
    other = np.random.default_rng(2).random(image.shape)
    q = quality.compare(other, image)
    assert q["psnr"] < 12 and q["ssim"] < 0.2 and q["max_abs_diff"] > 0.9


def test_psnr_matches_its_definition():
    a = np.zeros((8, 8, 3))
    b = np.full((8, 8, 3), 0.1)
    assert quality.psnr(a, b) == pytest.approx(20.0)


def test_shape_mismatch_is_an_error(image):
    with pytest.raises(ValueError, match="shapes"):
        quality.compare(image, image[:32])
