"""The training script's scene mix: `--shape-weight` sets how often a shape is drawn; bad ones refused."""

import argparse

import pytest
import torch

from pipelines.tiny_shapes.dataset import make_specs
from pipelines.tiny_shapes.train import _shape_weight, scene_weights


def test_a_shape_weight_of_one_half_draws_that_shape_half_as_often():
    specs = make_specs(4000, seed=0)
    assert scene_weights(specs, {}) is None, "without the setting, draws stay uniform"
    weights = scene_weights(specs, {"circle": 0.5})
    drawn = torch.multinomial(weights, 40_000, replacement=True, generator=torch.Generator().manual_seed(0))
    share = {s: sum(specs[i].shape == s for i in drawn.tolist()) / len(drawn) for s in ("circle", "square")}
    assert share["circle"] == pytest.approx(share["square"] / 2, rel=0.1), share


@pytest.mark.parametrize("text", ["hexagon=0.5", "circle", "circle=", "circle=abc", "circle=0", "circle=-1"])
def test_a_bad_shape_weight_is_refused_with_the_shapes_it_accepts(text):
    with pytest.raises(argparse.ArgumentTypeError, match="circle, square, triangle, star"):
        _shape_weight(text)
    assert _shape_weight("star=2") == ("star", 2.0)
