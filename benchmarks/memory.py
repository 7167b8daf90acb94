"""Peak memory of the memory techniques on this machine's CPU, on the SD 1.5 architecture with random weights.

1. `vae_tiling`: one VAE decode at 1024x1024 (latents 1x4x128x128), with and without tiling.
   Target: tiling cuts the decode's peak by >= 50%.
2. `vae_slicing`: one VAE decode of a batch of 4 (at --slicing-size), with and without slicing.
3. `attention_slicing`: one UNet call at 512x512 (latents 64x64, text context 1x77x768) with classic
   attention, SDPA, and attention slicing (slice_size "auto" = half the heads, and "max" = one head).

The VAE is AutoencoderKL with the SD 1.5 config (block_out_channels 128/256/512/512, latent 4 channels,
sample_size 512, so tiles are 512x512). The UNet is SD-1.5-shaped: same channels (320/640/1280/1280),
heads (8), cross-attention width (768) and latent size, so the attention score matrices are the real ones,
but one layer per block instead of two (--full-unet for the real depth; slower). Both are built from config
with random weights: nothing is downloaded. Techniques are applied with the studio's own registry functions.

Peak memory is the process's peak RSS above what was resident when the call started (VmHWM reset through
/proc/self/clear_refs, see studio.measure.memory_probe), after a garbage collection and malloc_trim so memory
freed by one measurement does not hide the next one's. fp32, batch as stated, one call per configuration.

Run: .venv/bin/python -m benchmarks.memory            (about 7.5 CPU-minutes, mostly the two 1024x1024
                                                      decodes: 13.6 min wall on a shared, busy 2-core machine)
     .venv/bin/python -m benchmarks.memory --quick    (small sizes, a smoke test of the script)
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import functools
import gc
import logging
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
from diffusers import AutoencoderKL, UNet2DConditionModel

from studio import devices
from studio.measure.memory_probe import PeakMemory
from studio.optimizations import Context, get

log = logging.getLogger("benchmarks.memory")
MB = 2**20
TILING_FLOOR = 0.50


@dataclass
class Row:
    """One technique against its baseline on one workload."""

    technique: str
    workload: str
    baseline: str
    base_mb: float
    mb: float
    base_s: float
    seconds: float

    @property
    def saving(self) -> float:
        return 1 - self.mb / self.base_mb if self.base_mb else 0.0


def sd15_vae() -> AutoencoderKL:
    """AutoencoderKL with the Stable Diffusion 1.5 config and random weights."""
    return AutoencoderKL(
        in_channels=3,
        out_channels=3,
        latent_channels=4,
        layers_per_block=2,
        sample_size=512,
        down_block_types=("DownEncoderBlock2D",) * 4,
        up_block_types=("UpDecoderBlock2D",) * 4,
        block_out_channels=(128, 256, 512, 512),
        scaling_factor=0.18215,
    ).eval()


def sd15_unet(layers_per_block: int = 1) -> UNet2DConditionModel:
    """A UNet with SD 1.5's channels, heads and cross-attention width; SD 1.5 itself has 2 layers per
    block."""
    return UNet2DConditionModel(
        sample_size=64,
        in_channels=4,
        out_channels=4,
        layers_per_block=layers_per_block,
        block_out_channels=(320, 640, 1280, 1280),
        cross_attention_dim=768,
        attention_head_dim=8,
        down_block_types=("CrossAttnDownBlock2D",) * 3 + ("DownBlock2D",),
        up_block_types=("UpBlock2D",) + ("CrossAttnUpBlock2D",) * 3,
    ).eval()


def _trim() -> None:
    """Collect garbage and hand freed heap pages back to the OS (glibc), so RSS starts from what is in use."""
    gc.collect()
    libc_name = ctypes.util.find_library("c")
    libc = ctypes.CDLL(libc_name) if libc_name else None
    if libc is not None and hasattr(libc, "malloc_trim"):
        libc.malloc_trim(0)


def measure(fn: Callable[[], Any]) -> tuple[float, float]:
    """Peak RSS added by one call of `fn` (MB) and its wall time (s)."""
    _trim()
    with torch.no_grad(), PeakMemory("cpu") as peak:
        start = time.perf_counter()
        fn()
        seconds = time.perf_counter() - start
    return peak.added / MB, seconds


def _ctx(*names: str, **settings: dict) -> Context:
    return Context(
        device="cpu", hw=devices.detect(), target=frozenset(names), technique_settings=settings, state={}
    )


def _with(pipe: SimpleNamespace, name: str, fn: Callable[[], Any]) -> tuple[float, float]:
    """Measure `fn` with the studio's technique `name` applied to `pipe`, then revert it."""
    opt, ctx = get(name), _ctx(name)
    opt.apply(pipe, ctx)
    try:
        return measure(fn)
    finally:
        opt.revert(pipe, ctx)


def vae_rows(side: int, slicing_side: int, tile: int | None = None) -> list[Row]:
    """vae_tiling on one large decode, vae_slicing on a batch of 4, each against the plain decode.

    Args:
        side: image side of the tiling decode.
        slicing_side: image side of the batch-4 slicing decode.
        tile: a smaller tile side than the config's 512 (only for --quick).
    """
    pipe = SimpleNamespace(vae=sd15_vae(), unet=None)
    if tile is not None:
        pipe.vae.tile_sample_min_size, pipe.vae.tile_latent_min_size = tile, tile // 8
    big = torch.randn(1, 4, side // 8, side // 8, generator=torch.Generator().manual_seed(0))
    batch = torch.randn(
        4, 4, slicing_side // 8, slicing_side // 8, generator=torch.Generator().manual_seed(1)
    )
    measure(
        functools.partial(pipe.vae.decode, torch.randn(1, 4, 8, 8), return_dict=False)
    )  # lazy init, not counted
    rows = []
    for name, latents in (("vae_tiling", big), ("vae_slicing", batch)):
        n, _, h, w = latents.shape
        decode = functools.partial(pipe.vae.decode, latents, return_dict=False)
        tech_mb, tech_s = _with(pipe, name, decode)
        base_mb, base_s = measure(decode)
        rows.append(
            Row(name, f"VAE decode {n}x{h * 8}x{w * 8}", "plain decode", base_mb, tech_mb, base_s, tech_s)
        )
        log.info("measured %s: %.0f -> %.0f MB", name, base_mb, tech_mb)
    return rows


ATTENTION = (
    ("classic", "classic_attention", None),
    ("sdpa", "sdpa", None),
    ("auto", "attention_slicing", "auto"),
    ("max", "attention_slicing", "max"),
)


def unet_rows(layers_per_block: int, latent: int) -> list[Row]:
    """attention_slicing ("auto", "max") against classic attention and against SDPA, and SDPA against
    classic."""
    pipe = SimpleNamespace(unet=sd15_unet(layers_per_block), vae=None)
    gen = torch.Generator().manual_seed(2)
    sample, context = torch.randn(1, 4, latent, latent, generator=gen), torch.randn(1, 77, 768, generator=gen)
    call = functools.partial(pipe.unet, sample, 10, context, return_dict=False)
    measure(functools.partial(pipe.unet, sample[..., :8, :8], 10, context, return_dict=False))  # lazy init
    got: dict[str, tuple[float, float]] = {}
    for label, name, size in ATTENTION:
        settings = {"attention_slicing": {"slice_size": size}} if size else {}
        get(name).apply(pipe, _ctx(name, **settings))
        got[label] = measure(call)
        log.info("measured %s attention: %.0f MB", label, got[label][0])
    workload = f"UNet call 1x{latent * 8}x{latent * 8}, {layers_per_block} layer/block"
    pairs = [
        ("sdpa", "classic", "sdpa"),
        ("attention_slicing (auto)", "classic", "auto"),
        ("attention_slicing (max)", "classic", "max"),
        ("attention_slicing (auto)", "sdpa", "auto"),
        ("attention_slicing (max)", "sdpa", "max"),
    ]
    return [
        Row(tech, workload, f"{base} attention", got[base][0], got[label][0], got[base][1], got[label][1])
        for tech, base, label in pairs
    ]


def table(rows: list[Row]) -> str:
    """A Markdown table: peak MB with and without, saving, and the latency cost."""
    lines = [
        "| technique | workload | vs | peak MB (vs) | peak MB | saving | time s (vs) | time s |",
        "|---|---|---|---:|---:|---:|---:|---:|",
    ]
    lines += [
        f"| {r.technique} | {r.workload} | {r.baseline} | {r.base_mb:.0f} | {r.mb:.0f} | {r.saving:+.0%} | "
        f"{r.base_s:.1f} | {r.seconds:.1f} |"
        for r in rows
    ]
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--size", type=int, default=1024, help="image side for the vae_tiling decode (default 1024)"
    )
    p.add_argument(
        "--slicing-size", type=int, default=256, help="image side for the batch-4 vae_slicing decode"
    )
    p.add_argument("--latent", type=int, default=64, help="UNet latent side (64 = 512x512 images)")
    p.add_argument("--full-unet", action="store_true", help="SD 1.5's 2 layers per block instead of 1")
    p.add_argument(
        "--quick", action="store_true", help="small sizes and 128px tiles: checks the script, not the target"
    )
    return p


def main(argv: list[str] | None = None) -> int:
    """Print the table; exit 1 if vae_tiling misses the target at the full size."""
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    tile = None
    if args.quick:
        args.size, args.slicing_size, args.latent, tile = 192, 64, 16, 128
    start = time.perf_counter()
    rows = vae_rows(args.size, args.slicing_size, tile) + unet_rows(2 if args.full_unet else 1, args.latent)
    print(
        f"Peak memory on CPU ({devices.detect().cpu_name}, torch {torch.__version__}, fp32, "
        f"{torch.get_num_threads()} threads),"
        f" SD 1.5 architecture with random weights, one call each (times are indicative);"
        f" {time.perf_counter() - start:.0f}s in all.\n"
    )
    print(table(rows))
    tiling = rows[0]
    verdict = "meets" if tiling.saving >= TILING_FLOOR else "MISSES"
    print(
        f"\nvae_tiling at {args.size}x{args.size}: {tiling.saving:.0%} lower peak; {verdict} the >= "
        f"{TILING_FLOOR:.0%} target."
    )
    return 0 if tiling.saving >= TILING_FLOOR or args.quick else 1


if __name__ == "__main__":
    sys.exit(main())
