"""The VAE decoder alone through OpenVINO: f32, 8-bit weights (what the int8 modes give it) and static int8
(`openvino[vae_int8=true]`), on SD 1.5's decoder with random weights, timed in interleaved rounds on this CPU.

    .venv/bin/python -m benchmarks.openvino_decoder [--side 256] [--rounds 5]

The static int8 model is made by the studio's own `openvino.int8.decoder_quantize`, with this CPU's
overflow fix, calibrated on seeded random latents (the technique calibrates on denoised ones); PSNR is of the
decoded image (as the pipeline maps it to 0-1) against f32's, on another latent.
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import torch
from diffusers import AutoencoderKL

from benchmarks.cpu_peers import cpu_line
from pipelines.architecture_configs import VAE
from studio import devices
from studio.measure import protocol
from studio.measure.quality import psnr
from studio.optimizations.openvino import int8 as int8
from studio.optimizations.openvino import models as ovm
from studio.optimizations.openvino.technique import overflow_fix


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--side", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    torch.manual_seed(0)
    decoder = AutoencoderKL(**VAE, sample_size=512).eval().decoder
    latent = torch.randn(1, 4, args.side // 8, args.side // 8)
    fix = overflow_fix("auto", devices.detect().cpu_flags)
    calibration = [(torch.randn(latent.shape).numpy(),) for _ in range(8)]
    built, models = {}, {}
    for name, make in (
        ("f32", lambda m: m),
        ("8-bit weights", ovm.compress_weights),
        ("static int8", lambda m: int8.decoder_quantize(m, calibration, fix)),
    ):
        start = time.perf_counter()
        models[name] = make(ovm.convert(decoder, (latent,)))
        built[name] = time.perf_counter() - start
    requests = {k: ovm.compile_for_cpu(m, "f32").create_infer_request() for k, m in models.items()}
    probe = latent.numpy()
    # as the pipeline post-processes the decoder's output: [-1, 1] to [0, 1]
    images = {k: np.clip(r.infer([probe])[0] / 2 + 0.5, 0, 1) for k, r in requests.items()}

    def call(request):
        def run() -> None:
            request.infer([probe])

        return run

    samples = protocol.interleaved({k: call(r) for k, r in requests.items()}, args.rounds, warmup=1)
    print(f"CPU: {cpu_line()}; torch {torch.__version__}; overflow fix {fix}")
    size = f"{args.side}x{args.side}"
    print(f"SD 1.5's VAE decoder (random weights), {size}, {args.rounds} interleaved rounds:")
    for name, times in samples.timed.items():
        if name == "f32":
            against, quality = "x1.00 (reference)", "reference"
        else:
            ratio = protocol.speedup(samples.timed["f32"], times)
            against = f"x{ratio.median:.2f} ({ratio.low:.2f}-{ratio.high:.2f}, {ratio.verdict})"
            quality = f"{psnr(images[name], images['f32']):.1f} dB"
        median = float(np.median(times))
        print(f"  {name:14} {median:.3f} s  {against}  {quality}  conversion {built[name]:.0f} s")


if __name__ == "__main__":
    main()
