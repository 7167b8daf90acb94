"""Inductor's autotuning results, carried from one run on the GPU machine to the next.

torch.compile's max-autotune benchmarks every GEMM and convolution template for each shape while it compiles
(on an H100, 4-40 s per shape for SD 1.5's UNet: minutes in all, more than a command with a time limit may
hold). Inductor keeps the timings in a local cache, one JSON file per GPU, CUDA and Triton version
(`$TORCHINDUCTOR_CACHE_DIR/cache/`), written after each shape. `run.sh` merges the carried files
(`benchmarks/gpu/autotune-cache/`) into that folder before the benchmark and copies it back into the output
folder's `autotune-cache/` after it, so a compile cut off by a time limit resumes from the shapes already
timed, on the same machine or on another with the same GPU, CUDA and Triton:

    python -m benchmarks.gpu.autotune_cache FROM_DIR INTO_DIR    # merge FROM_DIR's files into INTO_DIR

A shape timed in both keeps the timings of FROM_DIR (the newer run).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def merged(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """`old` with `new` laid over it, nested dictionaries merged key by key."""
    out = dict(old)
    for key, value in new.items():
        out[key] = (
            merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
        )
    return out


def shapes(path: Path) -> int:
    """How many shapes one cache file holds autotuning timings for.

    Inductor's layout: op -> shape key -> choice timings; beside them, at the top level, the padding pass's
    own entries (a matmul's time as a number, whether padding pays as a boolean), which are no shapes.
    """
    return sum(len(keys) for keys in json.loads(path.read_text())["cache"].values() if isinstance(keys, dict))


def merge(source: Path, target: Path) -> list[str]:
    """Merge every cache file of `source` into the file of the same name in `target`; a line per file."""
    lines = []
    for path in sorted(p for p in source.glob("*") if p.is_file()):
        target.mkdir(parents=True, exist_ok=True)
        new = json.loads(path.read_text())
        into = target / path.name
        old = json.loads(into.read_text()) if into.is_file() else {"cache": {}}
        into.write_text(json.dumps({**new, "cache": merged(old["cache"], new["cache"])}, indent=1))
        device = new.get("system", {}).get("device", {}).get("name") or "no GPU named"
        lines.append(f"{path.name[:12]} ({device}): {shapes(into)} shapes")
    return lines


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        raise SystemExit("usage: python -m benchmarks.gpu.autotune_cache FROM_DIR INTO_DIR")
    source, target = map(Path, args)
    for line in merge(source, target) if source.is_dir() else []:
        print(f"autotune cache: {line}")


if __name__ == "__main__":
    main()
