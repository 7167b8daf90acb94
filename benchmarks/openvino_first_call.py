"""Where the first call of a calibrated OpenVINO UNet goes, and what it draws: `openvino[mode=...]` (the UNet
only: `vae=false,text_encoder=false`) on sd15-arch, built in an empty cache, each phase timed; then the image
of each seed against PyTorch fp32's.

    .venv/bin/python -m benchmarks.openvino_first_call [--mode full_int8] [--steps 20] [--seeds 1 2]

Phases: the conversion, NNCF's quantization (the statistics, whose inference of each calibration sample also
denoises the trajectory it belongs to; fast bias correction; the int8 weights folded) and the CPU plugin's
compiles (the fp32 model for the trajectories' calls NNCF does not see, if any; the quantized one). The first
seed's call pays them; later seeds reuse the build.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from benchmarks.cpu_peers import cpu_line
from studio.manager import PipelineManager
from studio.measure import bench
from studio.measure.quality import psnr
from studio.optimizations.openvino import int8 as int8
from studio.optimizations.openvino import models as ovm
from studio.request import build_request

PHASES = {  # phase -> (owner, attribute) timed around each call
    "conversion": (ovm, "convert"),
    "NNCF quantization": (int8, "static_int8"),  # statistics, bias correction (not hybrid's 8-bit weights)
    "compile": (ovm, "compile_for_cpu"),
}
WITHIN_NNCF = {  # part of NNCF's quantization -> (module, class or None, attribute)
    "statistics": ("nncf.common.tensor_statistics.aggregator", "StatisticsAggregator", "collect_statistics"),
    "bias correction": (
        "nncf.quantization.algorithms.fast_bias_correction.algorithm",
        "FastBiasCorrection",
        "apply",
    ),
    "int8 weights folded": (  # NNCF's own reference to OpenVINO's pass (the conversion's is not timed)
        "nncf.openvino.quantization.quantize_model",
        None,
        "compress_quantize_weights_transformation",
    ),
}


def timed(spent: dict[str, float], phase: str, call: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(call)
    def run(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return call(*args, **kwargs)
        finally:
            spent[phase] = spent.get(phase, 0.0) + time.perf_counter() - start

    return run


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="sd15-arch")
    parser.add_argument("--mode", default="full_int8", choices=ovm.CALIBRATED)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--side", type=int, default=256)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--ranges", default="minmax", choices=ovm.ACTIVATION_RANGES)
    args = parser.parse_args()
    spent: dict[str, float] = {}
    for phase, (owner, name) in PHASES.items():
        setattr(owner, name, timed(spent, phase, getattr(owner, name)))
    ovm.openvino()  # usage reporting blocked before OpenVINO and NNCF are imported
    for phase, (module, cls, name) in WITHIN_NNCF.items():
        owner = importlib.import_module(module)
        owner = getattr(owner, cls) if cls else owner
        setattr(owner, name, timed(spent, phase, getattr(owner, name)))
    samples: list[int] = []
    quantize = int8.static_int8

    def counted(model: Any, calibration: list[Any], fix: str, float_ops: list[str], *ranges: str) -> Any:
        samples.append(len(calibration))
        return quantize(model, calibration, fix, float_ops, *ranges)

    int8.static_int8 = counted
    print(cpu_line())
    size = f"{args.side}x{args.side}"
    spec = f"mode={args.mode}" + (f",activation_ranges={args.ranges}" if args.ranges != "minmax" else "")
    print(f"{args.model} {size}, {args.steps} steps, openvino[{spec}] (the UNet only)")
    with tempfile.TemporaryDirectory(prefix="openvino-first-call-") as home:
        os.environ["STUDIO_HOME"] = home  # an empty cache: the first call builds
        for i, (seconds, db, stats) in enumerate(calls(args)):
            label = "first call" if i == 0 else "a later call"
            print(f"seed {args.seeds[i]}: {label} {seconds:.1f} s, {db:.2f} dB against PyTorch fp32")
            if i == 0:
                for phase in PHASES:
                    print(f"  {phase}: {spent.get(phase, 0.0):.1f} s")
                    if phase == "NNCF quantization":
                        for part in WITHIN_NNCF:
                            print(f"    {part}: {spent.get(part, 0.0):.1f} s")
                print(f"  calibration samples given to NNCF: {sum(samples)}")
                for how, count in stats.get("openvino_calibration_calls", {}).items():
                    print(f"  trajectory calls {how}: {count}")


def calls(args: argparse.Namespace) -> Iterator[tuple[float, float, dict[str, Any]]]:
    """Per seed: the seconds of the technique's call, its image's PSNR against PyTorch fp32's, and what the
    technique recorded."""
    manager = PipelineManager()
    settings = {
        "openvino": {
            "mode": args.mode,
            "activation_ranges": args.ranges,
            "vae": False,
            "text_encoder": False,
        }
    }
    for seed in args.seeds:
        plain, quantized = (
            build_request(
                model=args.model,
                prompt="a red circle",
                width=args.side,
                height=args.side,
                steps=args.steps,
                seed=seed,
                optimizations=optimizations,
                settings=settings if optimizations else {},
            )
            for optimizations in ([], ["openvino"])
        )
        with manager.acquire(plain) as prepared:
            reference = bench.run_once(prepared, plain).images
        start = time.perf_counter()
        with manager.acquire(quantized) as prepared:
            images = bench.run_once(prepared, quantized).images
        yield time.perf_counter() - start, psnr(images, reference), dict(prepared.ctx.stats)


if __name__ == "__main__":
    main()
