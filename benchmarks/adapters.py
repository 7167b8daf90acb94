"""LoRAs and the step lever, through the studio's engine: what a LoRA costs per step unfused and fused, what a
switch costs from disk and from RAM, what a LoRA strength sweep costs under torch_compile, and what few_step
and tiny_vae buy on the bundled model, with the prompt score beside the speed.

    .venv/bin/python -m benchmarks.adapters [--rounds 7] [--parts few_step,judge,overhead,switch,...]

Parts:
- few_step: one interleaved Compare on tiny-shapes, the 20-step baseline against few_step (4 steps);
- judge: the bundled model's judge over docs/tiny-shapes.md's prompt set (48 prompts x seeds
  0..N-1, `--seeds`, default 2), the 20-step baseline against few_step, per attribute;
- overhead: tiny-shapes (20 steps) and sd15-arch (256x256, 10 steps): no LoRA, one and two LoRAs unfused
  and fused, in interleaved rounds (each call timed alone: putting the LoRAs on is not in it); sd15-arch's
  LoRAs are random rank-16 ones on every attention projection, written to a temporary folder;
- switch: a LoRA put on from disk (its first use) and from RAM (the next), tiny-shapes;
- compile: torch_compile on tiny-shapes with `night` switched five times (scales 0.2-1): graphs built and the
  seconds of each switch;
- tiny_vae: tiny-shapes 20 steps with and without the tiny decoder, interleaved, and the PSNR between them.
Every ratio is a median over rounds with its range; the CPU is named on the first line.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from studio import devices, report
from studio.engine import Studio
from studio.manager import PipelineManager
from studio.measure import bench
from studio.measure.quality import psnr
from studio.recompiles import graph_builds
from studio.request import build_request
from studio.sweeps.compare import run_compare

PROMPT = "a big red circle on the left, on a white background"
PARTS = ("few_step", "judge", "overhead", "switch", "compile", "tiny_vae")


def timed(manager: PipelineManager, req: Any) -> tuple[float, Any, dict[str, Any]]:
    """One call of `req`: its seconds (the call alone), its images and the pipeline's stats."""
    with manager.acquire(req) as prepared:
        start = time.perf_counter()
        images = bench.run_once(prepared, req).images
        return time.perf_counter() - start, images, dict(prepared.ctx.stats)


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.3f} ({min(values):.3f}-{max(values):.3f})"


def interleaved(manager: PipelineManager, variants: dict[str, Any], rounds: int) -> dict[str, list[float]]:
    """Seconds per call of each variant, one call each per round, after one untimed call each."""
    for req in variants.values():
        timed(manager, req)
    seconds: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(rounds):
        for name, req in variants.items():
            seconds[name].append(timed(manager, req)[0])
    return seconds


def ratios_table(seconds: dict[str, list[float]], base: str) -> str:
    lines = [
        "| variant | seconds per call, median (range) | against the first, median (range) |",
        "|---|---|---|",
    ]
    for name, values in seconds.items():
        per_round = [b / v for b, v in zip(seconds[base], values, strict=True)]
        lines.append(f"| {name} | {spread(values)} | x{spread(per_round)} |")
    return "\n".join(lines)


def few_step_part(rounds: int) -> str:
    with tempfile.TemporaryDirectory() as home:
        studio = Studio(db_path=Path(home) / "runs.db", outputs=Path(home) / "out")
        request = build_request(model="tiny-shapes", prompt=PROMPT, seed=1, steps=20)
        result = run_compare(studio, request, ["few_step"], warmup=1, rounds=rounds)
    few = next(r for r in result.records if r["config"] == "few_step")
    exact = f"\n\nfew_step: x{few['speedup']:.3f} ({few['speedup_min']:.3f}-{few['speedup_max']:.3f})"
    return "few_step against the 20-step baseline, one Compare:\n\n" + report.markdown(result.records) + exact


def judge_part(seeds: int) -> str:
    from pipelines.tiny_shapes.evaluate import eval_prompts, score

    manager = PipelineManager()
    rows = []
    for label, optimizations in (("baseline, 20 steps", []), ("few_step", ["few_step"])):
        images, prompts = [], []
        for seed in range(seeds):
            for prompt in eval_prompts():
                req = build_request(
                    model="tiny-shapes", prompt=prompt, seed=seed, steps=20, optimizations=optimizations
                )
                images.append(report_image(timed(manager, req)[1]))
                prompts.append(prompt)
        accuracy = score(images, prompts)
        rows.append(
            f"| {label} | " + " | ".join(f"{accuracy[k]:.1%}" for k in ("shape", "colour", "position"))
        )
    head = "| run | shape | colour | position |\n|---|---|---|---|"
    title = f"The judge over 48 prompts x {seeds} seeds (0-{seeds - 1}):"
    return f"{title}\n\n{head}\n" + " |\n".join(rows) + " |"


def report_image(images: Any) -> Any:
    from PIL import Image

    return Image.fromarray((images[0].clip(0, 1) * 255).round().astype("uint8"))


def random_loras(folder: Path, count: int) -> list[str]:
    """`count` random rank-16 LoRAs on every attention projection of SD 1.5's UNet, in diffusers' layout."""
    from diffusers import UNet2DConditionModel
    from safetensors.torch import save_file

    from pipelines.architecture_configs import SD15_UNET

    unet = UNet2DConditionModel.from_config(SD15_UNET)
    names = []
    for index in range(count):
        generator = torch.Generator().manual_seed(index)
        tensors = {}
        for name, module in unet.named_modules():
            if name.endswith(("to_q", "to_k", "to_v", "to_out.0")):
                rank = 16
                tensors[f"unet.{name}.lora_A.weight"] = torch.randn(
                    rank, module.in_features, generator=generator
                )
                tensors[f"unet.{name}.lora_B.weight"] = 0.01 * torch.randn(
                    module.out_features, rank, generator=generator
                )
        path = folder / f"random-{index}.safetensors"
        save_file(tensors, path)
        names.append(str(path))
    return names


def overhead_part(rounds: int) -> str:
    out = []
    with tempfile.TemporaryDirectory(dir=Path.cwd()) as scratch:
        sd = random_loras(Path(scratch), 2)
        cases = {
            "tiny-shapes 64x64, 20 steps": (
                dict(model="tiny-shapes", steps=20),
                ["night:1", "tiny-shapes-lcm:0.3"],
            ),
            "sd15-arch 256x256, 10 steps": (dict(model="sd15-arch", steps=10), [f"{p}:1" for p in sd]),
        }
        for title, (fields, loras) in cases.items():
            manager = PipelineManager()

            def req(optimizations: list[str], chosen: list[str], fields=fields) -> Any:
                return build_request(
                    prompt=PROMPT, seed=1, optimizations=optimizations, loras=chosen, **fields
                )

            variants = {
                "no LoRA": req([], []),
                "1 LoRA": req([], loras[:1]),
                "2 LoRAs": req([], loras),
                "1 LoRA, fuse_lora": req(["fuse_lora"], loras[:1]),
                "2 LoRAs, fuse_lora": req(["fuse_lora"], loras),
            }
            seconds = interleaved(manager, variants, rounds)
            fused = psnr(
                timed(manager, variants["2 LoRAs, fuse_lora"])[1], timed(manager, variants["2 LoRAs"])[1]
            )
            table = ratios_table(seconds, "no LoRA")
            out.append(f"{title}:\n\n{table}\n\nfused against unfused (2 LoRAs): {fused:.1f} dB")
    return "\n\n".join(out)


def switch_part() -> str:
    """A switch to `night` read from disk (nothing kept), from the tensors kept in RAM (a pipeline that never
    had it), and turned back on (the pipeline keeps it loaded after a run without it)."""
    from studio.optimizations import adapters

    plain = build_request(model="tiny-shapes", prompt=PROMPT, seed=1, steps=2)
    night = build_request(model="tiny-shapes", prompt=PROMPT, seed=1, steps=2, loras=["night:1"])
    took: dict[str, list[float]] = {"from disk": [], "from RAM": [], "turned back on": []}
    for _ in range(5):
        adapters.CACHE.clear()
        for where in ("from disk", "from RAM"):
            manager = PipelineManager()
            timed(manager, plain)
            took[where].append(timed(manager, night)[2]["lora_switch_seconds"])
        timed(manager, plain)
        took["turned back on"].append(timed(manager, night)[2]["lora_switch_seconds"])
    return "A switch to `night` (tiny-shapes), 5 times each, seconds: " + ", ".join(
        f"{where} {spread(values)}" for where, values in took.items()
    )


def compile_part() -> str:
    manager = PipelineManager()
    lines = ["| `night` scale | seconds to switch | graphs built so far | call (s) |", "|---|---|---|---|"]
    for scale in (0.2, 0.4, 0.6, 0.8, 1.0, 0.2):
        req = build_request(
            model="tiny-shapes",
            prompt=PROMPT,
            seed=1,
            steps=20,
            optimizations=["torch_compile"],
            loras=[f"night:{scale}"],
        )
        seconds, _, stats = timed(manager, req)
        switch = stats.get("lora_switch_seconds")
        took = "-" if switch is None else f"{switch:.4f}"
        lines.append(f"| {scale} | {took} | {graph_builds(stats)} | {seconds:.2f} |")
    return "torch_compile with `night` switched five times (the first call compiles):\n\n" + "\n".join(lines)


def tiny_vae_part(rounds: int) -> str:
    manager = PipelineManager()
    variants = {
        "VAE": build_request(model="tiny-shapes", prompt=PROMPT, seed=1, steps=20),
        "tiny_vae": build_request(
            model="tiny-shapes", prompt=PROMPT, seed=1, steps=20, optimizations=["tiny_vae"]
        ),
    }
    seconds = interleaved(manager, variants, rounds)
    db = psnr(timed(manager, variants["tiny_vae"])[1], timed(manager, variants["VAE"])[1])
    table = ratios_table(seconds, "VAE")
    return f"tiny_vae on tiny-shapes, 20 steps:\n\n{table}\n\nPSNR against the VAE's image: {db:.1f} dB"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.adapters", description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--seeds", type=int, default=2, help="seeds 0..N-1 for each prompt in the judge part")
    parser.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated, of {', '.join(PARTS)}")
    args = parser.parse_args(argv)
    os.environ.setdefault("STUDIO_MODEL_ROOTS", str(Path.cwd()))
    print(
        f"CPU: {devices.detect().summary()['cpu_name']}, {os.cpu_count()} cores; torch {torch.__version__}\n"
    )
    parts = {
        "few_step": lambda: few_step_part(args.rounds),
        "judge": lambda: judge_part(args.seeds),
        "overhead": lambda: overhead_part(args.rounds),
        "switch": switch_part,
        "compile": compile_part,
        "tiny_vae": lambda: tiny_vae_part(args.rounds),
    }
    for name in args.parts.split(","):
        print(parts[name.strip()](), "\n", flush=True)


if __name__ == "__main__":
    main()
