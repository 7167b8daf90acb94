"""`python -m studio cards`: the fixed suite measured on this machine, written as a card; `--machines`
prints the cards of many machines side by side instead, running nothing; `--against CARD` also prints the
regression report between CARD (default: this machine's newest card) and the card just measured;
`--compare-cards OLD NEW` prints the report between two card files, running nothing.

Registered in `studio/cli/__init__.py` with `add_cards_parser(sub)` and `COMMANDS["cards"]`.
Nothing is imported here until the command runs: `--help` loads no model library.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any


def add_cards_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the `cards` command to the CLI's subparsers.

    Args:
        subparsers: what `ArgumentParser.add_subparsers()` returned.
    """
    p = subparsers.add_parser(
        "cards", help="the fixed suite measured on this machine, written as a card: what is fastest here"
    )
    p.add_argument(
        "--models", nargs="+", help="a subset of the suite (default: all its models on this device)"
    )
    p.add_argument(
        "--budget-s",
        type=float,
        default=900.0,
        help="the auto-tuner's time per model, in seconds (default 900)",
    )
    p.add_argument(
        "--configs",
        nargs="+",
        metavar="CONFIG",
        help="measure these configurations instead of searching ('openvino[mode=full_int8]', 'bf16+sdpa')",
    )
    p.add_argument("--rounds", type=int, default=3, help="interleaved timed rounds per Compare (default 3)")
    p.add_argument("--warmup", type=int, default=1, help="untimed calls per configuration first (default 1)")
    p.add_argument("--device", default="auto", help="auto (the first GPU, else the CPU), cpu or cuda:N")
    p.add_argument("--out", help="the folder the card goes to (default: cards/ in the studio's home)")
    p.add_argument(
        "--publish",
        metavar="OWNER/DATASET",
        help="also upload the card and this studio's compiled packages (aot_package; needs HF_TOKEN)",
    )
    p.add_argument(
        "--machines",
        nargs="?",
        const="",
        metavar="FOLDER|OWNER/DATASET",
        help="run nothing: print one table per model from the cards here (--out, docs/cards) and in this "
        "folder or dataset repository",
    )
    p.add_argument(
        "--against",
        nargs="?",
        const="",
        metavar="CARD",
        help="also compare the new card with CARD, a card of this machine (default: its newest in --out)",
    )
    p.add_argument(
        "--compare-cards",
        nargs=2,
        metavar=("OLD", "NEW"),
        help="run nothing: print the regression report between two cards of one machine",
    )
    p.add_argument("--json", action="store_true", help="print JSON")
    return p


def _progress() -> Any:
    """Progress lines on stderr, at most one every two seconds (and each new model's first)."""
    last = {"at": 0.0, "model": ""}

    def report(fraction: float, message: str) -> None:
        model = message.split(":", 1)[0]
        now = time.monotonic()
        if now - last["at"] >= 2.0 or model != last["model"]:
            print(f"[{fraction:4.0%}] {message}", file=sys.stderr, flush=True)
            last.update(at=now, model=model)

    return report


def cmd_machines(args: argparse.Namespace) -> int:
    """`--machines`: this studio's cards (--out), docs/cards and the source given, one table per model."""
    from studio.cards import collection, hub
    from studio.cli.output import emit

    found = hub.machines(args.machines, args.out)
    for sentence in [*found.refused, *([found.note] if found.note else [])]:
        print(f"warning: {sentence}", file=sys.stderr)
    emit(found.data(), args.json, collection.machines_markdown(found.tables))
    return 0


def cmd_compare_cards(args: argparse.Namespace) -> int:
    """`--compare-cards OLD NEW`: the regression report between two card files."""
    from studio.cards import regression
    from studio.cli.output import emit

    old, new = (_read(path) for path in args.compare_cards)
    report = regression.compare(old, new)
    emit(report, args.json, regression.markdown(report))
    return 0


def _read(path: str) -> dict[str, Any]:
    """A card file, or a ValidationError naming a file that is not there."""
    from studio.cards.collection import load_card
    from studio.errors import ValidationError

    try:
        return load_card(path)
    except OSError as exc:
        raise ValidationError(f"The card {path} cannot be read ({exc.strerror or exc}).") from exc


def _against(args: argparse.Namespace) -> dict[str, Any] | None:
    """`--against`'s card, checked against this machine and suite before anything is measured."""
    if args.against is None:
        return None
    from studio.cards import card, machine, regression
    from studio.cards.suite import SUITE_VERSION

    system = machine.snapshot()
    if args.against:
        old = _read(args.against)
    else:
        old = regression.newest_of_this_machine(args.out or card.default_folder(), system["fingerprint"])
    now = {"system": system, "suite": SUITE_VERSION, "path": "the card measured now"}
    regression.check_comparable(old, now)
    return old


def cmd_cards(args: argparse.Namespace) -> int:
    """Run the suite, write the card (and publish it), print its summary (StudioError exits 2 in cli.main)."""
    if args.machines is not None:
        return cmd_machines(args)
    if args.compare_cards:
        return cmd_compare_cards(args)
    from studio.cards import card, hub, regression
    from studio.cards.options import validate_options
    from studio.cards.run_suite import run_cards
    from studio.cli.output import emit
    from studio.optimizations import packages

    options = validate_options(
        models=args.models,
        budget_s=args.budget_s,
        configs=args.configs,
        rounds=args.rounds,
        warmup=args.warmup,
        device=args.device,
    )
    if args.publish:
        hub.check_publish(args.publish)  # refused before an hour of measuring, not after
    old = _against(args)  # so is a card that does not compare with the one about to be measured
    done = run_cards(options, progress=_progress())
    files = card.save(done, args.out)
    report = None if old is None else regression.compare(old, {**done.card, "path": str(files["card"])})
    kept = packages.files() if args.publish else []  # the compiled packages travel with the card
    published = hub.publish([files["card"]], args.publish, kept) if args.publish else None
    if published is not None:
        print(published.message, file=sys.stderr)
    listing = "\n".join(f"{kind}: {path}" for kind, path in files.items())
    data = {
        "card": done.card,
        "files": {k: str(v) for k, v in files.items()},
        "published": None if published is None else published.uploaded,
        **({} if report is None else {"regression": report}),
    }
    against = "" if report is None else f"\n\n{regression.markdown(report)}"
    emit(data, args.json, f"{card.summary(done.card)}\n{listing}{against}")
    return 0 if published is None or len(published.uploaded) == 1 + len(kept) else 1
