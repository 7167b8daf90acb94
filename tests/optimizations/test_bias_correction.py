"""Bias correction for static int8 (studio.optimizations.bias_correction): the mean error quantization adds
to each output channel is taken out of the biases, the float model the graph was exported from stays as it
was, and on the bundled model the correction engages without costing the image anything."""

from __future__ import annotations

import math
import statistics

import numpy as np
import pytest
import torch

from pipelines import loader
from studio.manager import PipelineManager
from studio.measure.quality import psnr
from tests.tiny import needs_torchao, run
from tests.tiny import technique_request as request


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 16, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(16, 16, 1)
        self.linear = torch.nn.Linear(16, 8)

    def forward(self, x):
        y = self.conv2(torch.relu(self.conv(x)))
        return self.linear(y.permute(0, 2, 3, 1))


def _observed(model, x):
    from studio.optimizations.static_quantization import Recipe, _pt2e

    quantize, _ = _pt2e()
    observed = quantize.prepare_pt2e(torch.export.export(model, (x,)).module(), Recipe().quantizer(model))
    observed(x)
    return quantize, observed


@needs_torchao
def test_the_mean_error_per_channel_shrinks_and_the_float_model_is_untouched():
    from studio.optimizations.bias_correction import correct_biases

    torch.manual_seed(0)
    model = Net().eval()
    x = torch.rand(4, 3, 16, 16) * 4
    with torch.no_grad():
        reference = model(x)
        before = {n: p.clone() for n, p in model.named_parameters()}
        quantize, plain = _observed(model, x)
        plain = quantize.convert_pt2e(plain)
        quantize, observed = _observed(model, x)
        assert correct_biases(observed, lambda m: m(x)) == 3, "two convolutions and the linear layer"
        corrected = quantize.convert_pt2e(observed)
        shift = lambda out: (out - reference).flatten(0, -2).mean(0).abs().mean()  # noqa: E731
        assert shift(corrected(x)) < 0.5 * shift(plain(x)), (shift(corrected(x)), shift(plain(x)))
    assert all(torch.equal(p, before[n]) for n, p in model.named_parameters()), "the float model changed"


PROMPTS = (
    "a big red circle on the left, on a white background",
    "a small green star at the top",
    "a big blue square at the bottom right",
    "a yellow triangle in the middle",
)


@needs_torchao
@pytest.mark.slow
def test_on_the_bundled_model_bias_correction_engages_and_costs_the_image_nothing(monkeypatch):
    """int8_static[layers=convolutions] with and without the correction, each built once (calibrated on the
    first prompt, as a user's first call does) and then drawing four prompts and seeds at 20 steps: PSNR
    against fp32 of the four images together (of their mean squared error). The correction must change every
    image (it engaged) and leave them as close to fp32 as without it, within the noise of four images.

    Its gain is within that noise on the bundled model. One image's PSNR swings by several dB either way (the
    denoising loop amplifies small differences; even torch's thread count moves the figures), and the mean
    error it takes out of each layer is a small part of the int8 UNet's error. Measured on an Intel Xeon with
    AMX (family 6 model 167), one thread, pooled, without -> with: the amx and vnni paths (the same integers)
    26.9 -> 27.8 dB, reduced_range (forced) 27.0 -> 26.2 dB; with the prompts' order rotated (another prompt
    calibrates), amx -0.2 to +1.0 dB and reduced_range -2.1 to 0.0 dB. The converted graphs run uncompiled:
    the same integers."""
    monkeypatch.setattr(torch, "compile", lambda module, **kwargs: module)
    manager = PipelineManager(load=loader.load)
    cases = list(enumerate(PROMPTS, start=1))
    baselines = [run(manager, request(prompt=prompt, seed=seed, steps=20))[0] for seed, prompt in cases]
    images: dict[bool, list[np.ndarray]] = {}
    for correct in (False, True):  # one build each: the pipeline keeps it while only the prompt changes
        settings = {
            "int8_static": {"calibration_steps": 4, "layers": "convolutions", "bias_correction": correct}
        }
        images[correct] = [
            run(manager, request(["int8_static"], settings, prompt=prompt, seed=seed, steps=20))[0]
            for seed, prompt in cases
        ]
    assert all(not np.array_equal(a, b) for a, b in zip(images[False], images[True], strict=True)), (
        "the correction must change what the int8 UNet draws"
    )
    plain, corrected = (pooled_psnr(list(map(psnr, images[c], baselines))) for c in (False, True))
    assert corrected >= plain - 1.5, (plain, corrected)


def pooled_psnr(psnrs: list[float]) -> float:
    """The PSNR of several images taken together: of the mean of their squared errors."""
    return -10 * math.log10(statistics.mean(10 ** (-p / 10) for p in psnrs))
