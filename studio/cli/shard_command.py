"""`python -m studio shard`: save a model's components as sharded safetensors and list the shards.

Registered in `studio/cli/__init__.py` with `add_shard_parser(sub)` and `COMMANDS["shard"] = cmd_shard`.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


def add_shard_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the `shard` command to the CLI's subparsers.

    Args:
        subparsers: what `ArgumentParser.add_subparsers()` returned.
    """
    p = subparsers.add_parser("shard", help="save a model as sharded safetensors and list the shards")
    p.add_argument("--model", default="tiny-shapes", help="registry id, hub id or local directory")
    p.add_argument("--out", required=True, help="a new or empty output directory")
    p.add_argument(
        "--max-shard-size", default="5GB", help="largest shard: 500KB, 1MB, 5GB, 2GiB or bytes (default 5GB)"
    )
    p.add_argument("--json", action="store_true", help="print JSON")
    return p


def _mb(n: int) -> str:
    return f"{n / 1e6:.2f} MB"


def format_report(report: dict[str, Any]) -> str:
    """The shard listing as text: one line per component, one indented line per shard."""
    lines = [f"{report['model']} -> {report['out']} (max shard {_mb(report['max_shard_size'])})"]
    for comp in report["components"]:
        kind = f"{len(comp['shards'])} shards" if comp["sharded"] else "1 file (not sharded)"
        lines.append(f"{comp['name']}: {_mb(comp['total_size'])} in {kind}")
        lines += [f"  {s['file']}  {_mb(s['bytes'])}  {s['tensors']} tensors" for s in comp["shards"]]
    if not report["loadable"]:
        lines.append(
            "note: this directory is outside STUDIO_MODEL_ROOTS; add its parent there to load it in the "
            "studio."
        )
    return "\n".join(lines)


def cmd_shard(args: argparse.Namespace) -> int:
    """Run `shard`: load on the CPU, save in shards, print the listing (StudioError exits 2 in cli.main)."""
    from studio.cli.output import emit
    from studio.engine import Studio

    out = str(Path(args.out).expanduser().resolve())  # --out is the user's path, not a name under the home
    report = Studio().shard(args.model, out, args.max_shard_size)
    if not report["loadable"]:
        log.warning("%s is outside the allowed model roots; set STUDIO_MODEL_ROOTS to load it", report["out"])
    emit(report, args.json, format_report(report))
    return 0
