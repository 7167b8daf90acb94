"""The tiny-shapes analyzer proves itself on procedurally drawn ground truth before it judges."""

from __future__ import annotations

import pytest
from PIL import Image

from pipelines.tiny_shapes import analyze, fidelity, parse_prompt
from pipelines.tiny_shapes.dataset import ATTRIBUTES, make_prompt, make_specs, render


@pytest.fixture(scope="module")
def ground_truth():
    """600 seeded scenes (a seed the training set does not use) and their images."""
    specs = make_specs(600, seed=2024)
    return specs, [render(s) for s in specs]


def test_analyzer_is_at_least_98_percent_right_on_ground_truth(ground_truth):
    specs, images = ground_truth
    for attr in ATTRIBUTES:
        hits = sum(analyze(img)[attr] == getattr(s, attr) for s, img in zip(specs, images, strict=True))
        assert hits / len(specs) >= 0.98, f"{attr}: {hits}/{len(specs)}"


def test_fidelity_scores_ground_truth_as_a_match(ground_truth):
    specs, images = ground_truth
    scores = [fidelity(img, s.prompt())["score"] for s, img in zip(specs[:100], images[:100], strict=True)]
    assert sum(scores) / len(scores) >= 0.98


def test_fidelity_reports_mismatches_per_attribute(ground_truth):
    specs, images = ground_truth
    spec, image = specs[0], images[0]
    other_shape = next(s for s in ("circle", "square", "triangle", "star") if s != spec.shape)
    prompt = make_prompt(other_shape, spec.colour, spec.background, spec.position, spec.size)
    result = fidelity(image, prompt)
    assert result["correct"]["shape"] is False
    assert result["correct"]["colour"] is True
    assert result["detected"]["shape"] == spec.shape


def test_parse_prompt_reads_every_attribute_and_leaves_missing_ones_none():
    full = parse_prompt("A big red circle on the left, on a white background")
    assert full == {
        "shape": "circle",
        "colour": "red",
        "background": "white",
        "position": "left",
        "size": "big",
    }
    short = parse_prompt("a blue star in the center")
    assert short == {
        "shape": "star",
        "colour": "blue",
        "background": None,
        "position": "centre",
        "size": None,
    }


def test_blank_image_has_no_shape_and_scores_zero():
    blank = Image.new("RGB", (64, 64), (245, 245, 245))
    result = fidelity(blank, "a small green square at the top, on a white background")
    assert result["detected"]["shape"] is None
    assert result["correct"]["background"] is True
    assert result["score"] == pytest.approx(0.2)
