"""`python -m studio loras`: the LoRAs the studio finds by name, in `$STUDIO_HOME/loras` then the bundled
`assets/loras`: each one's name, the model it was trained for, rank, layers, size, AUTOMATIC1111's short hash
and path; `--json` for scripts.

Registered in `studio/cli/__init__.py` with `add_loras_parser(sub)` and `COMMANDS["loras"] = cmd_loras`.
"""

from __future__ import annotations

import argparse
from typing import Any

from studio.cli.output import emit


def add_loras_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the `loras` command to the CLI's subparsers."""
    p = subparsers.add_parser("loras", help="the LoRAs found by name: base model, rank, size, hash, path")
    p.add_argument("--json", action="store_true", help="print JSON")
    return p


def cmd_loras(args: argparse.Namespace) -> int:
    from studio.engine.lora_listing import folders, lora_rows

    rows = lora_rows()
    lines = [f"{'name':24} {'base':12} {'rank':>4} {'layers':>6} {'MB':>6}  {'hash':12}  path"]
    lines += [
        f"{r['name']:24} {r['base']:12} {r['rank']:>4} {r['layers']:>6} {r['size_mb']:>6.2f}  {r['hash']}  "
        f"{r['path']}"
        for r in rows
    ]
    if not rows:
        lines = [f"No LoRAs in {' or '.join(folders())}."]
    emit(rows, args.json, "\n".join(lines))
    return 0
