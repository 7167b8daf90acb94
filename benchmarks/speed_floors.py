"""Speed targets through the engine (PipelineManager + timing protocol), on this CPU.

    # tiny-shapes, 20 steps: best vs fp32 (target x3.0)
    .venv/bin/python -m benchmarks.speed_floors tiny [--rounds 5]
    # sd15-arch 256x256, 10 steps (target x3.5)
    .venv/bin/python -m benchmarks.speed_floors sd15 [--rounds 5]
    # (sd15 takes ~35 min: int8_static calibrates and compiles for ~5 min, torch_compile ~4 min, and an
    # fp32 round is ~50 s; `--config baseline --config int8_static` alone takes ~20 min at 5 rounds)

A configuration is techniques joined by commas, then optional settings:
    --config "deepcache,cfg_cutoff,torch_compile deepcache.interval=4 cfg_cutoff.after=0.3"

tiny: each configuration is timed end to end (tokenize, denoise, decode) with rounds interleaved
across configurations (A B C A B C ...), medians; prompt fidelity is measured on 48 fixed prompts
x 1 seed through the engine's call path, so a fast configuration that draws the wrong picture shows.

sd15: techniques that keep the math only (precision, layout, attention kernel, compile,
quantization, threads); every configuration is loaded and warmed up (compile and trace costs are
reported separately), then timed in interleaved rounds, each speedup as the median of the
per-round ratios with their range. Also the
UNet output's relative error vs fp32 on a guided step's inputs (noise, the prompt's embeddings), the UNet's
FLOPs per call (torch.utils.flop_counter), the achieved GFLOP/s as a fraction of this machine's measured fp32,
bf16 and int8 matmul peaks, and each configuration's UNet call split by kind of kernel.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import torch
from PIL import Image
from torch.utils.flop_counter import FlopCounterMode

from studio import devices
from studio.engine import Studio
from studio.manager import PipelineManager
from studio.measure import bench, protocol
from studio.optimizations import call_contexts
from studio.request import build_request, parse_setting_args

TINY_PROMPT = "a big red circle on the left, on a white background"


def _studio() -> Studio:
    home = tempfile.mkdtemp(prefix="bench-speed-")
    return Studio(db_path=f"{home}/runs.db", outputs=f"{home}/out", manager=PipelineManager(max_pipelines=8))


def _request(config: str, model: str, prompt: str, **kw):
    """'deepcache,cfg_cutoff deepcache.interval=4 cfg_cutoff.after=0.3' -> a validated request."""
    names, *settings = config.split()
    optimizations = [o for o in names.split(",") if o and o != "baseline"]
    return build_request(
        model=model,
        prompt=prompt,
        optimizations=optimizations,
        settings=parse_setting_args(settings) or None,
        **kw,
    )


def eval_fidelity(studio: Studio, request) -> dict[str, float]:
    """Prompt fidelity of `request`'s configuration on the bundled model's 48 fixed prompts (seed 0), through
    the engine's own call path, so call-stage techniques and step hooks (cfg_cutoff) act as they do for
    users."""
    from pipelines.tiny_shapes.evaluate import eval_prompts, score

    prompts, images = eval_prompts(), []
    for prompt in prompts:
        req = dataclasses.replace(request, prompt=prompt, seed=0)
        with studio.manager.acquire(req) as prepared:
            out = bench.run_once(prepared, req).images[0]
        images.append(Image.fromarray((out * 255).round().clip(0, 255).astype(np.uint8)))
    return score(images, prompts)


def tiny(rounds: int, configs: list[str]) -> None:
    # One engine per configuration: interleaving A B A B on one engine would revert and rebuild (and
    # recompile) the irreversible techniques at every switch, which is not what a user running one
    # configuration pays.
    studios = {c: _studio() for c in configs}
    requests = {c: _request(c, "tiny-shapes", TINY_PROMPT, seed=1, steps=20) for c in configs}

    # load, trace/compile and first call are the warm-up; then the engine's interleaved rounds, end to end
    def end_to_end(c: str):
        def run() -> None:  # timed by the protocol, logging included
            studios[c].generate(requests[c])

        return run

    samples = protocol.interleaved({c: end_to_end(c) for c in configs}, rounds, warmup=1)
    times, first = samples.timed, {c: w[0] for c, w in samples.warmups.items()}
    print(
        f"tiny-shapes, 64x64, 20 steps, guidance 6.0, CPU ({torch.get_num_threads()} threads); "
        f"{rounds} interleaved rounds, end-to-end per image including logging; fidelity on 48 prompts x "
        "seed 0:"
    )
    for c in configs:
        acc = eval_fidelity(studios[c], requests[c])
        med = statistics.median(times[c])
        ratio = protocol.speedup(times[configs[0]], times[c])
        print(
            f"  {c:60} {med:.3f}s (min {min(times[c]):.3f}, max {max(times[c]):.3f})  x{ratio.median:.2f} "
            f"({ratio.low:.2f}-{ratio.high:.2f}, {ratio.verdict})  "
            f"first call {first[c]:.1f}s  fidelity colour {acc['colour']:.0%} shape {acc['shape']:.0%} "
            f"position {acc['position']:.0%} mean {statistics.mean(acc.values()):.1%}",
            flush=True,
        )


def _unet_inputs(pipe, side: int):
    """A guided step's UNet inputs as the pipeline makes them: noise, and the text encoder's embeddings of the
    benchmark prompt and of the empty prompt (statically quantized layers are calibrated on such inputs)."""
    gen = torch.Generator().manual_seed(0)
    sample = torch.randn(2, pipe.unet.config.in_channels, side // 8, side // 8, generator=gen)
    with torch.no_grad():
        cond, uncond = pipe.encode_prompt("a photo", "cpu", 1, True)
    return sample, torch.tensor(500), torch.cat([uncond, cond]).float()


def _unet_out(prepared, inputs) -> torch.Tensor:
    unet = prepared.pipe.unet
    dtype = next(p.dtype for p in prepared.pipe.text_encoder.parameters())
    with torch.no_grad(), call_contexts(prepared.call_opts, prepared.ctx):
        sample, t, context = inputs
        return unet(sample.to(dtype), t, encoder_hidden_states=context.to(dtype)).sample.float()


KERNEL_KINDS = (
    ("int8 conv", ("onednn::qconv",)),
    ("int8 linear", ("onednn::qlinear", "aten::_int_mm")),
    ("attention", ("aten::_scaled_dot_product", "aten::_efficient_attention", "aten::_flash_attention")),
    (
        "float conv/matmul",
        (
            "aten::mkldnn_convolution",
            "aten::convolution",
            "aten::_convolution",
            "aten::mm",
            "aten::addmm",
            "aten::bmm",
            "aten::baddbmm",
            "mkldnn::",
            "onednn::",
        ),
    ),
)


def unet_breakdown(prepared, inputs) -> dict[str, float]:
    """Share of one UNet call's CPU time by kind of kernel (profiler self time); "other" is normalisation,
    activations, (de)quantisation and layout copies, inside compiled graphs or not."""
    from torch.profiler import profile

    with profile() as prof:
        _unet_out(prepared, inputs)
    shares = dict.fromkeys([k for k, _ in KERNEL_KINDS] + ["other"], 0.0)
    for event in prof.key_averages():
        kind = next((k for k, prefixes in KERNEL_KINDS if event.key.startswith(prefixes)), "other")
        shares[kind] += event.self_cpu_time_total
    total = sum(shares.values())
    return {k: v / total for k, v in shares.items() if v}


def matmul_peak(dtype: torch.dtype = torch.bfloat16, n: int = 4096, reps: int = 10) -> float:
    """Measured GFLOP/s (GOP/s for int8, through torch._int_mm) of an n x n matmul in `dtype` here (best of
    `reps`)."""
    if dtype == torch.int8:
        a, b = (torch.randint(-128, 128, (n, n), dtype=torch.int8) for _ in range(2))
        mm = torch._int_mm
    else:
        a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
        mm = torch.mm
    mm(a, b)
    best = float("inf")
    for _ in range(reps):
        start = time.perf_counter()
        mm(a, b)
        best = min(best, time.perf_counter() - start)
    return 2 * n**3 / best / 1e9


def sd15(rounds: int, configs: list[str], side: int) -> None:
    # Every configuration stays loaded in its own engine (fp32 SD 1.5 is ~4 GB), so rounds interleave
    # (A B C A B C ...) and the host's speed swings (here +-25% over tens of seconds) fall on all of
    # them alike.
    peaks = {
        name: matmul_peak(dtype)
        for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16), ("int8", torch.int8))
    }
    print(
        f"matmul peak on this machine ({torch.get_num_threads()} threads): "
        + ", ".join(f"{k} {v:.0f} {'GOP/s' if k == 'int8' else 'GFLOP/s'}" for k, v in peaks.items())
        + f" ({devices.detect().cpu_name}); UNet throughput below as a fraction of each",
        flush=True,
    )
    studios = {c: _studio() for c in configs}
    requests = {
        c: _request(c, "sd15-arch", "a photo", seed=1, steps=10, width=side, height=side) for c in configs
    }
    step: dict[str, list[float]] = {c: [] for c in configs}

    def call(c: str):
        def run() -> float:
            m = studios[c].generate(requests[c]).metrics
            step[c].append(m["step_median"])
            return m["latency_s"]

        return run

    samples = protocol.interleaved(
        {c: call(c) for c in configs}, rounds, warmup=1
    )  # warm-up: calibrate/compile
    latency, first = samples.timed, {c: w[0] for c, w in samples.warmups.items()}
    step = {c: v[1:] for c, v in step.items()}
    reference, flops = None, None
    base = configs[0]
    print(
        f"sd15-arch {side}x{side}, 10 steps, guidance, CPU; {rounds} interleaved rounds, pipeline call end "
        "to end "
        f"(text encoder, denoising, VAE decode); speedup = median of the per-round ratios to {base} "
        "(min-max):"
    )
    for c in configs:
        with studios[c].manager.acquire(requests[c]) as prepared:
            inputs = _unet_inputs(prepared.pipe, side)
            out = _unet_out(prepared, inputs)
            shares = unet_breakdown(prepared, inputs)
            if flops is None:
                with FlopCounterMode(display=False) as counter:
                    _unet_out(prepared, inputs)
                flops = counter.get_total_flops()
        reference = out if reference is None else reference
        rel = float((out - reference).norm() / reference.norm())
        ratio = protocol.speedup(latency[base], latency[c])
        med_step = statistics.median(step[c])
        print(
            f"  {c:48} {statistics.median(latency[c]):.2f}s (min {min(latency[c]):.2f}, max "
            f"{max(latency[c]):.2f}) "
            f"x{ratio.median:.2f} ({ratio.low:.2f}-{ratio.high:.2f}, {ratio.verdict})  first call "
            f"{first[c]:.1f}s  "
            f"step {med_step:.3f}s  UNet rel. error {rel:.2e}  UNet {flops / med_step / 1e9:.0f} GFLOP/s = "
            f"{flops / med_step / 1e9 / peaks['bf16']:.0%} of the bf16 peak, "
            f"{flops / med_step / 1e9 / peaks['fp32']:.0%} of the fp32 peak, "
            f"{flops / med_step / 1e9 / peaks['int8']:.0%} of the int8 one",
            flush=True,
        )
        print(
            "      UNet call by kernel: " + ", ".join(f"{k} {v:.0%}" for k, v in shares.items()), flush=True
        )
    print(f"UNet FLOPs per call (batch 2 = guidance, {side}x{side}): {flops / 1e9:.1f} GFLOP")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("which", choices=("tiny", "sd15"))
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--side", type=int, default=256)
    parser.add_argument("--config", action="append", default=None)
    args = parser.parse_args()
    if args.which == "tiny":
        static = "torch_compile.dynamic=false"
        tiny(
            args.rounds or 7,
            args.config
            or [
                "baseline",
                "bf16",
                f"torch_compile {static}",
                f"torch_compile,deepcache {static}",
                f"torch_compile,deepcache,cfg_cutoff cfg_cutoff.after=0.4 {static}",
                f"torch_compile,deepcache,cfg_cutoff cfg_cutoff.after=0.4 {static} "
                "torch_compile.cpp_wrapper=true",
            ],
        )
    else:
        sd15(
            args.rounds or 5,
            args.config
            or [
                "baseline",
                "channels_last,torch_compile torch_compile.dynamic=false torch_compile.freezing=true",
                "int8_static",
            ],
            args.side,
        )
