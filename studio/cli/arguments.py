"""Command-line arguments of a generation request, shared by `python -m studio` and `python -m
studio.distributed`;
`studio.request.request_from_args` turns them into a request."""

from __future__ import annotations

import argparse

from pipelines.schedulers import SCHEDULERS
from studio.request.limits import MAX_GUIDANCE, MAX_IMAGES, MAX_SEED, MAX_STEPS


def request_args(p: argparse.ArgumentParser) -> None:
    """The request's own arguments (model, prompt, sizes, settings) and the warm-up count."""
    own = "default: the model's own"
    p.add_argument(
        "--model", default="tiny-shapes", help="registry id, hub id or local directory (default: tiny-shapes)"
    )
    p.add_argument("--prompt", required=True)
    p.add_argument("--negative-prompt", default="")
    p.add_argument("--seed", type=int, default=0, help=f"0 to {MAX_SEED}, or -1 for a random one (default 0)")
    p.add_argument("--steps", type=int, help=f"denoising steps, 1 to {MAX_STEPS} ({own})")
    p.add_argument(
        "--guidance", type=float, help=f"classifier-free guidance scale, 0 to {MAX_GUIDANCE:g} ({own})"
    )
    p.add_argument("--width", type=int, help=f"pixels, a multiple of 8 ({own})")
    p.add_argument("--height", type=int, help=f"pixels, a multiple of 8 ({own})")
    p.add_argument("--scheduler", help=f"{', '.join(SCHEDULERS)} ({own})")
    p.add_argument("--device", default="auto", help="auto (the first GPU, else the CPU), cpu, cuda:N or mps")
    p.add_argument("--setting", action="append", default=[], help="technique.setting=value")
    p.add_argument(
        "--batch",
        type=int,
        default=1,
        help=f"images per prompt, in one pipeline call (1 to {MAX_IMAGES}; default 1)",
    )
    p.add_argument(
        "--lora",
        action="append",
        default=[],
        metavar="SOURCE[:SCALE]",
        help="a LoRA: a name in the LoRA folders (python -m studio loras), a .safetensors file or a hub id, "
        "with its scale (default 1); repeat for several",
    )
    p.add_argument("--vae", help="a VAE to swap in: an AutoencoderKL folder, a .safetensors file or a hub id")
    p.add_argument(
        "--single-file-config", help="for a .safetensors model: the diffusers folder its configs come from"
    )
    p.add_argument(
        "--warmup", type=int, default=None, help="untimed calls per configuration first (default 1)"
    )
    p.add_argument("--json", action="store_true", help="print JSON")


def rounds_arg(p: argparse.ArgumentParser, default: int) -> None:
    """`--rounds`: the timed calls of each configuration (`rounds` in every record)."""
    p.add_argument(
        "--rounds",
        dest="rounds",
        type=int,
        default=None,
        help=f"timed calls per configuration, interleaved with the others (default {default})",
    )


def optimizations_arg(p: argparse.ArgumentParser) -> None:
    """`--optimizations a b` (the request's word; `--opt a --opt b` as before), techniques by name."""
    p.add_argument(
        "--optimizations",
        "--opt",
        dest="optimizations",
        action="extend",
        nargs="+",
        default=[],
        metavar="NAME",
        help="technique names, e.g. `--optimizations bf16 channels_last`; see `optimizations`",
    )
