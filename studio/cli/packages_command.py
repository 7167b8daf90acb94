"""`python -m studio packages`: the compiled packages this studio keeps (`aot_package`), what each was built
for and what it costs on disk; `--remove KEY` (or `all`) deletes them (the next first call of that shape
compiles).

Registered in `studio/cli/__init__.py` with `add_packages_parser(sub)` and `COMMANDS["packages"] =
cmd_packages`.
"""

from __future__ import annotations

import argparse
import shutil
from typing import Any

from studio.cli.output import emit
from studio.errors import ValidationError


def add_packages_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the `packages` command to the CLI's subparsers.

    Args:
        subparsers: what `ArgumentParser.add_subparsers()` returned.
    """
    p = subparsers.add_parser("packages", help="the compiled packages kept (aot_package) and their size")
    p.add_argument(
        "--remove", metavar="KEY|all", help="delete one package (its key, as listed) or all of them"
    )
    p.add_argument("--json", action="store_true", help="print JSON")
    return p


def _line(entry: dict[str, Any]) -> str:
    env = entry.get("environment") or {}
    return (
        f"{entry['key']}  {entry.get('model') or '?'} {entry.get('part', '?')} at "
        f"{entry.get('inputs', '?')}  "
        f"{entry.get('size_mb', 0):.1f} MB  compiled in {entry.get('compile_s', 0):.0f} s on "
        f"{entry.get('created_at', '?')}  (torch {env.get('torch', '?')}, {env.get('device', '?')})"
    )


def cmd_packages(args: argparse.Namespace) -> int:
    from studio.optimizations import packages

    kept = packages.listing()
    if args.remove:
        chosen = kept if args.remove == "all" else [e for e in kept if e["key"] == args.remove]
        if not chosen:
            raise ValidationError(
                f"No compiled package {args.remove!r} is kept in {packages.cache_root()}; "
                "`python -m studio packages` lists their keys."
            )
        for entry in chosen:
            shutil.rmtree(packages.cache_root() / entry["key"])
        kept = [e for e in kept if e not in chosen]
    total = round(sum(e.get("size_mb", 0) for e in kept), 1)
    data = {"folder": str(packages.cache_root()), "total_mb": total, "packages": kept}
    text = "\n".join(
        [f"{len(kept)} compiled package(s), {total:.1f} MB in {data['folder']}", *map(_line, kept)]
    )
    emit(data, args.json, text)
    return 0
