"""`python -m studio combinations`: what combines with what, every pair of the chosen techniques on one model
and device, refused (with the registry's reason), failed (with the error) or measured against one baseline in
the same interleaved rounds (`studio.sweeps.combinations`).

Registered in `studio/cli/__init__.py` with `add_combinations_parser(sub)` and
`COMMANDS["combinations"] = cmd_combinations`.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

WIDTH = 110  # the text table is cut into blocks of columns this wide
LEGEND = (
    "A cell: the pair's speedup over the baseline (the median of its per-round ratios; ≈: within noise) and "
    "its image's PSNR against the baseline's image; on the diagonal, the technique alone."
)


def add_combinations_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the `combinations` command to the CLI's subparsers.

    Args:
        subparsers: what `ArgumentParser.add_subparsers()` returned.
    """
    p = subparsers.add_parser(
        "combinations", help="what combines with what: every pair of techniques, measured"
    )
    p.add_argument("--model", default="tiny-shapes", help="registry id, hub id or local directory")
    p.add_argument("--prompt", help="default: the model's example prompt")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--steps", type=int, help="denoising steps (default: the model's own)")
    p.add_argument("--guidance", type=float, help="default: the model's own")
    p.add_argument("--width", type=int, help="pixels, a multiple of 8 (default: the model's own)")
    p.add_argument("--height", type=int, help="pixels, a multiple of 8 (default: the model's own)")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda:N or mps")
    which = p.add_mutually_exclusive_group()
    which.add_argument(
        "--techniques", nargs="+", metavar="NAME", help="the techniques to pair (at least two)"
    )
    which.add_argument(
        "--all-speed-precision",
        action="store_true",
        help="every speed and precision technique that can run here (the default)",
    )
    p.add_argument(
        "--include-compile",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="techniques that compile, trace, convert or calibrate on their first call: always, or never "
        "(--no-include-compile); default: named ones always, of every technique those the time allows",
    )
    p.add_argument("--max-cells", type=int, help="measure at most this many cells (the diagonal's included)")
    p.add_argument("--warmup", type=int, default=1, help="untimed calls per cell first (default 1)")
    p.add_argument("--rounds", type=int, default=3, help="interleaved timed rounds (default 3)")
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="print the plan (refusals, cells to measure, estimate); run nothing",
    )
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print JSON")
    out.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    return p


def text_table(names: list[str], rows: list[list[str]], width: int = WIDTH) -> str:
    """The table as aligned text: rows named, columns numbered (their names listed above), cut into blocks
    of columns that fit `width` characters, each block with the rows' names again."""
    label = max(len(n) for n in names) + 4
    cols = [max(len(str(i + 1)), *(len(r[i]) for r in rows)) + 2 for i in range(len(names))]
    key = [f"{i + 1:>2} {name}" for i, name in enumerate(names)]
    blocks, start = [], 0
    while start < len(names):
        end = start + 1
        while end < len(names) and label + sum(cols[start : end + 1]) <= width:
            end += 1
        head = " " * label + "".join(f"{i + 1:<{cols[i]}}" for i in range(start, end))
        lines = [
            f"{i + 1:>2} {n}".ljust(label) + "".join(f"{r[j]:<{cols[j]}}" for j in range(start, end))
            for i, (n, r) in enumerate(zip(names, rows, strict=True))
        ]
        blocks.append("\n".join(line.rstrip() for line in [head, *lines]))
        start = end
    return "\n".join(["Columns: " + ", ".join(key), "", "\n\n".join(blocks)])


def markdown_table(names: list[str], rows: list[list[str]]) -> str:
    """The table as Markdown, techniques in code type."""
    head = ["| | " + " | ".join(f"`{n}`" for n in names) + " |", "|---" * (len(names) + 1) + "|"]
    return "\n".join(head + [f"| `{n}` | " + " | ".join(r) + " |" for n, r in zip(names, rows, strict=True)])


def render(result: Any, as_markdown: bool) -> str:
    """The headline, the table (text or Markdown), its legend and the reasons under it."""
    from studio.sweeps import combinations_report

    names, rows = list(result.plan.techniques), combinations_report.grid(result)
    table = markdown_table(names, rows) if as_markdown else text_table(names, rows)
    why = [f"- {line}" if as_markdown else f"  {line}" for line in combinations_report.reasons(result)]
    parts = [combinations_report.headline(result), table, LEGEND]
    head = "Why:\n\n" if as_markdown else "Why:\n"  # a Markdown list needs its blank line
    return "\n\n".join(parts + ([head + "\n".join(why)] if why else []))


def cmd_combinations(args: argparse.Namespace) -> int:
    """Run `combinations`: plan (refused above the limits before anything runs), measure, print."""
    from studio.cli.output import emit
    from studio.engine import Studio
    from studio.request import build_request
    from studio.sweeps import combinations, combinations_report

    fields = ("seed", "steps", "guidance", "width", "height", "device")
    request = build_request(
        model=args.model, prompt=args.prompt or _example(args.model), **{k: getattr(args, k) for k in fields}
    )
    studio = Studio()
    plan = combinations.plan_combinations(
        request,
        args.techniques,
        include_compile=args.include_compile,
        max_cells=args.max_cells,
        warmup=args.warmup,
        rounds=args.rounds,
        known=lambda r: found.cold_s if (found := studio.first_call(r)) else None,
    )
    count = len([c for c in plan.cells if c.outcome == "planned"])
    estimate = f"{count} cells to measure, about {plan.estimate_s / 60:.0f} min"
    if args.dry_run:
        result = combinations.CombinationsResult(plan, plan.cells, None, None)
        emit(
            combinations_report.as_json(result), args.json, f"{render(result, args.markdown)}\n\n{estimate}."
        )
        return 0
    print(estimate, file=sys.stderr)
    result = combinations.run_combinations(studio, plan, progress=_progress())
    emit(combinations_report.as_json(result), args.json, render(result, args.markdown))
    return 0


def _progress():
    """A progress callback that says on stderr each call as it starts (not each step), with the minutes
    since the first."""
    seen: list[str] = []
    start = time.monotonic()

    def progress(done: float, calls: int, where: str) -> None:
        call = where.split(", step ")[0]
        if not seen or seen[-1] != call:
            seen.append(call)
            minutes = (time.monotonic() - start) / 60
            print(f"[{len(seen)}/{calls}, {minutes:.1f} min] {call}", file=sys.stderr, flush=True)

    return progress


def _example(model: str) -> str:
    from pipelines.registry import resolve

    return resolve(model).example_prompt
