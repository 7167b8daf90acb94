"""Transformer techniques on flux-tiny, on this CPU, through the engine's Compare.

    .venv/bin/python -m benchmarks.transformer_speed [--rounds 5] [--steps 8] [--group keep ...]

Each group is one Compare (one run-log group) against fp32: warm-up calls (compile costs land there), then
interleaved rounds (A B C, A B C, ...); a speedup is the median of the per-round ratios with their range.
Every group also times `bf16`, so each line gives x vs fp32 and x vs bf16 (the same rounds), PSNR of the image
against fp32's, the first call and the run's peak memory. Groups:
- keep: techniques that keep fp32's math (fused QKV, the attention dispatcher, torch.compile whole or
  regional);
- precision: bf16, autocast, torchao int8 (dynamic, weight-only) and layerwise casting;
- cache: diffusers' step caches (random weights: the first block's output always changes a lot, so the first
  block cache is given a high threshold), alone and with the best keep-the-math configuration;
- memory: layerwise casting and group offloading (to disk on a CPU), with the transformer's weight bytes as it
  runs, on flux-tiny and on Flux.1-dev's transformer counted on the meta device.

Targets, reported as met or not: best keep-the-math >= x1.5 vs fp32, best with a step cache >= x2.0 (with its
PSNR), layerwise casting cuts the transformer's weight memory by >= 45%.
"""

from __future__ import annotations

import argparse
import os
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

from benchmarks.cpu_peers import cpu_line
from studio.engine import Studio
from studio.manager import PipelineManager
from studio.measure import protocol
from studio.request import build_request
from studio.sweeps.compare import run_compare

COMPILED = "torch_compile[dynamic=false,freezing=true]"
BEST_KEEP = "fused_qkv+torch_compile[cpp_wrapper=true,dynamic=false,freezing=true]"
GROUPS = {
    "keep": [
        "fused_qkv",
        "attention_backend[backend=_native_flash]",
        "torch_compile",
        "torch_compile[regional=true]",
        COMPILED,
        f"fused_qkv+{COMPILED}",
        BEST_KEEP,
    ],
    "precision": [
        "autocast",
        "int8_dynamic",
        "int8_weight_only",
        "layerwise_casting",
        "layerwise_casting[skip=embeddings]",
    ],
    "cache": [
        "first_block_cache",
        "first_block_cache[threshold=0.5]",
        "first_block_cache[threshold=1.0]",
        "pyramid_attention_broadcast",
        "faster_cache",
        "taylorseer_cache",
        "taylorseer_cache[cache_interval=3]",
        f"first_block_cache[threshold=0.5]+{BEST_KEEP}",
        f"first_block_cache[threshold=1.0]+{BEST_KEEP}",
    ],
    "memory": [
        "layerwise_casting",
        "layerwise_casting[skip=embeddings]",
        "group_offload",
        "group_offload[offload_type=leaf_level]",
    ],
}
TARGETS = {"keep": 1.5, "cache": 2.0}
EXACT_DB = 90.0  # PSNR above which a configuration kept the math (another summation order)


def _row(record: dict, run, times: dict) -> str:
    label = run.request.config_label
    bf16 = protocol.speedup(times["bf16"], times[label]) if "bf16" in times else None
    db = record.get("psnr_db")
    return (
        f"| {label} | {record['latency_s'] * 1000:.0f} ms | x{record['speedup']:.2f} "
        f"({record['speedup_min']:.2f}-{record['speedup_max']:.2f}) {record['verdict']} | "
        + (f"x{bf16.median:.2f} ({bf16.low:.2f}-{bf16.high:.2f})" if bf16 else "-")
        + f" | {'identical' if db is None else f'{db:.1f} dB'} | {record['first_call_s'] or 0:.1f} s "
        f"| {record['peak_memory_mb'] or 0:.0f} MB |"
    )


def run_group(
    name: str, configs: list[str], rounds: int, steps: int
) -> list[tuple[str, float, float | None]]:
    """One Compare; prints a Markdown table and returns (config, x vs fp32, PSNR) per configuration."""
    home = tempfile.mkdtemp(prefix="bench-transformer-")
    studio = Studio(
        db_path=f"{home}/runs.db", outputs=f"{home}/out", manager=PipelineManager(max_pipelines=8)
    )
    request = build_request(model="flux-tiny", prompt="a red circle", seed=1, steps=steps)
    result = run_compare(studio, request, ["bf16", *configs], warmup=1, rounds=rounds)
    times = {r.request.config_label: r.metrics["latency_all"] for r in result.results if r is not None}
    print(f"\n{name} (group {result.group_id}, {rounds} rounds, {steps} steps, 64x64):\n")
    print("| configuration | latency | vs fp32 | vs bf16 | PSNR vs fp32 | first call | peak RSS |")
    print("|---|---|---|---|---|---|---|")
    found = []
    for record, run in zip(result.records, result.results, strict=True):
        if run is None:
            print(f"| {record['config']} | failed: {record['error']} |")
            continue
        print(_row(record, run, times), flush=True)
        found.append((run.request.config_label, record["speedup"], record.get("psnr_db")))
    return found


def weight_bytes(model: torch.nn.Module) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters())


def casting_cut(model: torch.nn.Module, skip: str) -> tuple[float, float]:
    """The share of `model`'s weight bytes the layerwise_casting technique (fp8 e4m3 storage, setting `skip`)
    saves, applied to the model in fp32 and to the model in bf16."""
    from studio import devices
    from studio.optimizations import REGISTRY, Context

    pipe = type("Pipe", (), {"unet": None, "transformer": model})()
    cuts = []
    for dtype in (torch.float32, torch.bfloat16):
        before = weight_bytes(torch.nn.Module.to(model, dtype))
        ctx = Context(
            "cpu", devices.detect(), "flux", technique_settings={"layerwise_casting": {"skip": skip}}
        )
        REGISTRY["layerwise_casting"].apply(pipe, ctx)
        cuts.append(1 - weight_bytes(model) / before)
        REGISTRY["layerwise_casting"].revert(pipe, ctx)
    return cuts[0], cuts[1]


def memory_report() -> dict[str, float]:
    """Layerwise casting's weight-byte cut on flux-tiny's transformer and on Flux.1-dev's (meta device)."""
    from pipelines import transformer_architectures as ta

    print("\nlayerwise casting (fp8 e4m3 storage), the transformer's weight bytes as it runs:\n")
    cuts = {}
    for name in ("flux-tiny", "flux"):
        with torch.device("meta" if name == "flux" else "cpu"):
            model = ta.models(name)["transformer"]
        for skip in ("default", "embeddings"):
            cut = cuts[f"{name}, skip={skip}"] = casting_cut(model, skip)
            print(f"- {name}, skip={skip}: -{cut[0]:.0%} vs fp32, -{cut[1]:.0%} vs bf16")
    return {k: v[1] for k, v in cuts.items()}


def verdicts(found: dict[str, list], cut: dict[str, float] | None) -> None:
    print("\ntargets:")
    keep = [(s, c) for c, s, db in found.get("keep", []) if db is None or db >= EXACT_DB]
    cache = [(s, c, db) for c, s, db in found.get("cache", []) if "cache" in c or "broadcast" in c]
    if keep:
        best = max(keep)
        met = "met" if best[0] >= TARGETS["keep"] else "not met"
        print(f"- best keep-the-math vs fp32: x{best[0]:.2f} ({best[1]}): {met} (target x1.5)")
    if cache:
        best = max(cache, key=lambda r: r[0])
        met = "met" if best[0] >= TARGETS["cache"] else "not met"
        db = "identical" if best[2] is None else f"{best[2]:.1f} dB"
        print(f"- best with a step cache vs fp32: x{best[0]:.2f} ({best[1]}, PSNR {db}): {met} (target x2.0)")
    for name, value in (cut or {}).items():
        met = "met" if value >= 0.45 else "not met"
        print(f"- layerwise casting ({name}), the transformer's weights vs bf16: -{value:.0%}: {met} (45%)")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--group", action="append", choices=sorted(GROUPS), default=None)
    args = parser.parse_args()
    print(f"CPU: {cpu_line()}; torch {torch.__version__}", flush=True)
    found = {
        name: run_group(name, GROUPS[name], args.rounds, args.steps) for name in args.group or list(GROUPS)
    }
    cut = memory_report() if "memory" in found else None
    verdicts(found, cut)


if __name__ == "__main__":
    main()
