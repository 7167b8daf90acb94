"""On CPUs, against OpenVINO: the peer's configurations and the studio's own, side by side, through Compare.

    .venv/bin/python -m benchmarks.cpu_peers sd15 [--rounds 3]   # sd15-arch 256x256, 10 steps, guidance 7.5
        [--group quantized] [--add CONFIG] [--drop CONFIG] [--all]
    .venv/bin/python -m benchmarks.cpu_peers sd15 --group "keep the math" --drop openvino \
        --add "openvino[winograd=true]"                            # Winograd's fp32 on a 24 GB machine
    .venv/bin/python -m benchmarks.cpu_peers tiny [--rounds 7]   # tiny-shapes 64x64, 20 steps, + fidelity

Each group is one Compare (one run-log group): warm-up calls, then interleaved rounds (A B C, A B C, ...);
a speedup is the median of the per-round ratios, with their range. OpenVINO's rows are the studio's
`openvino` technique (OpenVINO's `convert_model` and NNCF, the recipe optimum-intel uses), so both sides
run on the same prompt, seed, scheduler, threads and timer. Groups:
- keep the math: fp32 PyTorch, OpenVINO fp32 (f32 inference), the same with the 3x3 convolutions by
  Winograd's minimal filtering (fp32, the result to rounding), and the studio's compiled UNet;
- quantized: OpenVINO hybrid int8 as optimum-intel makes it (NNCF's default overflow fix: the first layer
  only), the studio's full int8 (OpenVINO, the Linear layers as 1x1 int8 convolutions), OpenVINO 8-bit
  weights, the studio's int8_static (oneDNN), all layers and convolutions only (OpenVINO's hybrid recipe),
  and, on CPUs without VNNI or AMX, the studio's hybrid int8 with 7-bit weights in every int8 convolution
  (its `overflow_fix` default there);
- bf16 (CPUs with AMX or AVX512-BF16 only): OpenVINO with its default precision (and its hybrid int8), and the
  studio's bf16, eager and compiled (channels last, static shapes, frozen weights).
Each line gives the median seconds per image, x vs PyTorch fp32 and x vs the group's OpenVINO row, PSNR of
the image against PyTorch fp32's, the first call (conversion, calibration, compilation) and, on tiny-shapes,
prompt fidelity on 48 fixed prompts.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

from benchmarks.speed_floors import eval_fidelity
from studio import devices
from studio.engine import Studio
from studio.measure import protocol
from studio.request import validate_request
from studio.sweeps.compare import run_compare

COMPILED = "channels_last+torch_compile[dynamic=false,freezing=true]"
OPTIMUM_HYBRID = "openvino[mode=hybrid_int8,overflow_fix=first_layer_only]"  # optimum-intel's recipe
STUDIO_HYBRID = "openvino[mode=hybrid_int8]"  # overflow_fix=auto: the same as optimum's on VNNI or AMX CPUs
FULL_INT8 = "openvino[mode=full_int8]"
WINOGRAD = "openvino[winograd=true]"  # fp32, its 3x3 convolutions by Winograd's F(4,3) or F(2,3)
BF16_COMPILED = f"bf16+{COMPILED}"
GROUPS = {
    "keep the math": ("openvino", ["openvino", WINOGRAD, COMPILED]),
    "quantized": (
        OPTIMUM_HYBRID,
        [
            OPTIMUM_HYBRID,
            FULL_INT8,
            STUDIO_HYBRID,
            "openvino[mode=int8_weights]",
            "int8_static[layers=convolutions]",
            "int8_static",
        ],
    ),
    "bf16": (
        "openvino[inference_precision=auto]",
        [
            "openvino[inference_precision=auto]",
            "openvino[inference_precision=auto,mode=hybrid_int8]",
            "bf16",
            BF16_COMPILED,
        ],
    ),
}
# Left out on sd15-arch unless --all: each configuration keeps a copy of the ~4 GB model for the sweep, and
# these add ~10 min and ~4 GB each on a 2-core, 24 GB machine (fp32 compile measured x0.76 there before; a
# fourth configuration in the quantized group ran out of the 24 GB while int8_static compiled, and the
# sweep's memory check refuses four there).
SD15_OPTIONAL = {
    COMPILED,
    WINOGRAD,  # with OpenVINO fp32 in the same sweep the two converted UNets and three copies pass 20 GB
    STUDIO_HYBRID,
    "int8_static[layers=convolutions]",
    "openvino[mode=int8_weights]",
    "int8_static",
    "openvino[inference_precision=auto,mode=hybrid_int8]",
    "bf16",
}
MODELS = {
    "sd15": {"model": "sd15-arch", "prompt": "a photo", "steps": 10, "width": 256, "height": 256},
    "tiny": {"model": "tiny-shapes", "prompt": "a big red circle on the left, on a white background"},
}


def cpu_line() -> str:
    hw = devices.detect()
    flags = sorted(hw.cpu_flags & {"avx2", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_int8"})
    return (
        f"{hw.cpu_model} ({hw.cpu_count} cores, {torch.get_num_threads()} torch threads; {' '.join(flags)})"
    )


def fidelity_of(studio: Studio, request) -> float | None:
    """Mean prompt fidelity (colour, shape, position) on the bundled model's 48 fixed prompts, seed 0."""
    return (
        statistics.mean(eval_fidelity(studio, request).values()) if request.model == "tiny-shapes" else None
    )


def run_group(name: str, peer: str, configs: list[str], which: str, rounds: int) -> None:
    home = tempfile.mkdtemp(prefix="bench-peers-")
    studio = Studio(db_path=f"{home}/runs.db", outputs=f"{home}/out")
    request = validate_request(seed=1, **MODELS[which])
    result = run_compare(studio, request, configs, warmup=1, rounds=rounds)
    times = {r.request.config_label: r.metrics["latency_all"] for r in result.results if r is not None}
    print(f"\n{name} (group {result.group_id}, {rounds} rounds):", flush=True)
    for record, run in zip(result.records, result.results, strict=True):
        if run is None:
            print(f"  {record['config']:58} failed: {record['error']}")
            continue
        label = run.request.config_label
        vs_peer = protocol.speedup(times[peer], times[label]) if peer in times else None
        fidelity = fidelity_of(studio, run.request)
        print(
            f"  {label:58} {record['latency_s']:7.3f} s  x{record['speedup']:.2f} "
            f"({record['speedup_min']:.2f}-{record['speedup_max']:.2f}, {record['verdict']})  "
            + (
                f"vs OpenVINO x{vs_peer.median:.2f} ({vs_peer.low:.2f}-{vs_peer.high:.2f})  "
                if vs_peer
                else ""
            )
            + (f"PSNR {record['psnr_db']:.1f} dB  " if record.get("psnr_db") is not None else "PSNR -  ")
            + f"first call {record['first_call_s']:.1f} s"
            + (f"  fidelity {fidelity:.1%}" if fidelity is not None else "")
            + (f"  host busy {record['host_busy_pct']:.0f}%" if record.get("host_busy") else ""),
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("which", choices=sorted(MODELS))
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--group", action="append", choices=sorted(GROUPS), default=None)
    parser.add_argument("--all", action="store_true", help="sd15: also the configurations in SD15_OPTIONAL")
    parser.add_argument(
        "--add",
        action="append",
        default=[],
        metavar="CONFIG",
        help="also this configuration in each group run (one of SD15_OPTIONAL, or any other)",
    )
    parser.add_argument(
        "--drop", action="append", default=[], metavar="CONFIG", help="leave this configuration out"
    )
    args = parser.parse_args()
    rounds = args.rounds or (3 if args.which == "sd15" else 7)
    print(f"CPU: {cpu_line()}; torch {torch.__version__}", flush=True)
    hw = devices.detect()
    for name in args.group or list(GROUPS):
        if name == "bf16" and not hw.cpu_bf16:
            print(f"\n{name}: skipped, this CPU has no bf16 instructions (OpenVINO's default is f32 here)")
            continue
        peer, configs = GROUPS[name]
        if devices.int8_path(hw.cpu_flags) != "reduced_range":
            configs = [c for c in configs if c != STUDIO_HYBRID]  # it resolves to optimum's recipe there
        if args.which == "sd15" and not args.all:
            configs = [c for c in configs if c not in SD15_OPTIONAL or c in args.add]
        configs = [c for c in [*configs, *(c for c in args.add if c not in configs)] if c not in args.drop]
        run_group(name, peer, configs, args.which, rounds)


if __name__ == "__main__":
    main()
