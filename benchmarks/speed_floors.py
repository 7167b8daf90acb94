"""Issue 'Faster than the docs' floors, through the engine (PipelineManager + timing protocol), on this CPU.

    .venv/bin/python -m benchmarks.speed_floors tiny   [--rounds 5]   # tiny-shapes, 20 steps: best vs fp32 (floor x3.0)
    .venv/bin/python -m benchmarks.speed_floors sd15   [--rounds 2]   # sd15-arch 256x256, 10 steps (floor x3.5)

tiny: each configuration is timed end to end (tokenize, denoise, decode) with rounds interleaved
across configurations (A B C A B C ...), medians; prompt fidelity is measured on 48 fixed prompts
x 1 seed with the configured pipeline, so a fast configuration that draws the wrong picture shows.

sd15: techniques that keep the math only (precision, layout, attention kernel, compile,
quantization, threads); each configuration is measured after a warm-up (compile and trace costs
are reported separately), the fp32 baseline is measured first and last to show drift. Also the
UNet output's relative error vs fp32 on fixed inputs, the UNet's FLOPs per call
(torch.utils.flop_counter) and the achieved GFLOP/s as a fraction of this machine's measured bf16
matmul peak.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
from torch.utils.flop_counter import FlopCounterMode

from studio import devices
from studio.manager import PipelineManager
from studio.optimizations import call_contexts
from studio.service import Studio
from studio.validate import validate_request

TINY_PROMPT = "a big red circle on the left, on a white background"


def _studio() -> Studio:
    home = tempfile.mkdtemp(prefix="bench-speed-")
    return Studio(db_path=f"{home}/runs.db", outputs=f"{home}/out", manager=PipelineManager(max_pipelines=8))


def tiny(rounds: int, configs: list[str]) -> None:
    from pipelines.tiny_shapes.evaluate import eval_prompts, evaluate

    studio = _studio()
    requests = {c: validate_request(model="tiny-shapes", prompt=TINY_PROMPT, seed=1, steps=20,
                                    opts=[o for o in c.split(",") if o and o != "baseline"]) for c in configs}
    times: dict[str, list[float]] = {c: [] for c in configs}
    for req in requests.values():  # warm-up: load, trace/compile, first call
        studio.generate(req, warmup=1)
    for _ in range(rounds):
        for c, req in requests.items():
            start = time.perf_counter()
            studio.generate(req)
            times[c].append(time.perf_counter() - start)
    base = statistics.median(times[configs[0]])
    print(f"tiny-shapes, 64x64, 20 steps, guidance on, CPU ({torch.get_num_threads()} threads); "
          f"{rounds} interleaved rounds, end-to-end per image including logging:")
    for c, req in requests.items():
        with studio.manager.acquire(req) as prepared, call_contexts(prepared.call_opts, prepared.ctx):
            acc, _ = evaluate(prepared.pipe, eval_prompts(), seeds=[0])
        med = statistics.median(times[c])
        print(f"  {c:45} {med:.3f}s (min {min(times[c]):.3f}, max {max(times[c]):.3f})  x{base / med:.2f}  "
              f"fidelity colour {acc['colour']:.0%} shape {acc['shape']:.0%} position {acc['position']:.0%} "
              f"mean {statistics.mean(acc.values()):.1%}")


def _unet_inputs(pipe, batch: int, side: int):
    gen = torch.Generator().manual_seed(0)
    sample = torch.randn(batch, pipe.unet.config.in_channels, side // 8, side // 8, generator=gen)
    context = torch.randn(batch, 77, pipe.unet.config.cross_attention_dim, generator=gen)
    return sample, torch.tensor(500), context


def _unet_out(prepared, inputs) -> torch.Tensor:
    unet = prepared.pipe.unet
    dtype = next(p.dtype for p in prepared.pipe.text_encoder.parameters())
    with torch.no_grad(), call_contexts(prepared.call_opts, prepared.ctx):
        sample, t, context = inputs
        return unet(sample.to(dtype), t, encoder_hidden_states=context.to(dtype)).sample.float()


def matmul_peak(dtype: torch.dtype = torch.bfloat16, n: int = 4096, reps: int = 10) -> float:
    """Measured GFLOP/s of an n x n matmul in `dtype` on this machine (best of `reps`)."""
    a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
    torch.mm(a, b)
    best = float("inf")
    for _ in range(reps):
        start = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - start)
    return 2 * n**3 / best / 1e9


def sd15(rounds: int, configs: list[str], side: int) -> None:
    studio = _studio()
    peaks = {name: matmul_peak(dtype) for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16))}
    peak = max(peaks.values())
    print(f"matmul peak on this machine ({torch.get_num_threads()} threads): "
          + ", ".join(f"{k} {v:.0f} GFLOP/s" for k, v in peaks.items())
          + f" (AMX: {devices.detect().amx_bf16}); fractions below are of the higher one")
    requests = {c: validate_request(model="sd15-arch", prompt="a photo", seed=1, steps=10, width=side, height=side,
                                    opts=[o for o in c.split(",") if o and o != "baseline"]) for c in configs}
    order = [*configs, configs[0]]  # the baseline again at the end: drift shows as a change in it
    reference, flops, results = None, None, {}
    for i, c in enumerate(order):
        req = requests[c]
        result = studio.generate(req, warmup=1, repeats=rounds)
        m = result.metrics
        with studio.manager.acquire(req) as prepared:
            inputs = _unet_inputs(prepared.pipe, 2, side)
            out = _unet_out(prepared, inputs)
            if flops is None:
                with FlopCounterMode(display=False) as counter:
                    _unet_out(prepared, inputs)
                flops = counter.get_total_flops()
        reference = out if reference is None else reference
        rel = float((out - reference).norm() / reference.norm())
        step = m["step_median"]
        key = c if i < len(configs) else f"{c} (again, last)"
        results[key] = m["latency_median"]
        print(f"  {key:48} {m['latency_median']:.2f}s (min {m['latency_min']:.2f}, max {m['latency_max']:.2f}) "
              f"first call {m['first_call_seconds']:.1f}s  step {step:.3f}s  "
              f"x{results[configs[0]] / m['latency_median']:.2f}  UNet rel. error {rel:.2e}  "
              f"UNet {flops / step / 1e9:.0f} GFLOP/s = {flops / step / 1e9 / peak:.0%} of the matmul peak", flush=True)
        if i < len(configs) - 1:  # free the configuration's pipeline before the next loads
            studio.manager = PipelineManager(max_pipelines=8)
    print(f"UNet FLOPs per call (batch 2 = guidance, {side}x{side}): {flops / 1e9:.1f} GFLOP")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("which", choices=("tiny", "sd15"))
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--side", type=int, default=256)
    parser.add_argument("--config", action="append", default=None)
    args = parser.parse_args()
    if args.which == "tiny":
        tiny(args.rounds or 5, args.config or ["baseline", "bf16,channels_last", "deepcache",
                                               "bf16,channels_last,deepcache", "bf16,channels_last,deepcache,token_merging"])
    else:
        sd15(args.rounds or 2, args.config or ["baseline", "bf16,channels_last", "bf16,channels_last,jit_trace_unet",
                                               "bf16,channels_last,torch_compile", "int8_dynamic,channels_last"], args.side)
