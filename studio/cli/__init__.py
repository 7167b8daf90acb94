"""`python -m studio ...`: the engine without a browser, same validation, same database.

Each command imports what it needs when it runs: `--help` and a bad argument answer without loading torch."""

from __future__ import annotations

import argparse
import logging
import sys

from studio import settings
from studio.cli.arguments import optimizations_arg, request_args, rounds_arg
from studio.cli.cards_command import add_cards_parser, cmd_cards
from studio.cli.combinations_command import add_combinations_parser, cmd_combinations
from studio.cli.loras_command import add_loras_parser, cmd_loras
from studio.cli.output import emit, results_only_on_stdout
from studio.cli.packages_command import add_packages_parser, cmd_packages
from studio.cli.shard_command import add_shard_parser, cmd_shard
from studio.cli.timeline_command import add_timeline_parser, cmd_timeline
from studio.errors import StudioError, describe
from studio.request.sweep_limits import AutotuneSettings

log = logging.getLogger("studio")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m studio", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true")
    sub = parser.add_subparsers(dest="command", required=True)
    listings = {
        "system": "this machine: CPU, RAM, GPUs, devices and library versions",
        "optimizations": "every technique, its group, and whether it can run here (and why not)",
    }
    for name, text in listings.items():
        sub.add_parser(name, help=text).add_argument("--json", action="store_true")
    sub.choices["optimizations"].add_argument(
        "--model", help="what can run for this model (its family: sd, sdxl, sd3, flux); default: any model"
    )
    gen = sub.add_parser("generate", help="one image, timed and logged")
    request_args(gen)
    rounds_arg(gen, 1)
    optimizations_arg(gen)
    cmp_ = sub.add_parser("compare", help="baseline vs configurations, side by side")
    request_args(cmp_)
    rounds_arg(cmp_, 5)
    cmp_.add_argument(
        "--config",
        action="append",
        default=[],
        help="'baseline', 'bf16,channels_last' or 'deepcache[interval=2]' (repeat)",
    )
    cmp_.add_argument(
        "--axis",
        help="an X axis: steps, size, scheduler, batch, seed ('+4': 4 seeds from --seed), prompt (search and "
        "replace: the first value is found in the prompt, each value replaces it), lora (a LoRA's strength: "
        "night:0,night:1) or a setting such as deepcache.interval",
    )
    cmp_.add_argument("--values", default="", help="the axis values, e.g. '1,2,4,8' ('auto' for batch)")
    cmp_.add_argument("--y-axis", help="a Y axis besides the X axis, of the same kinds: a grid per config")
    cmp_.add_argument("--y-values", default="", help="the Y axis values, e.g. 'circle,square' for prompt")
    tune = sub.add_parser("autotune", help="the fastest configuration that meets a quality floor")
    tuned = AutotuneSettings()  # the auto-tuner's defaults: flags left out keep them
    request_args(tune)
    rounds_arg(tune, tuned.rounds)
    tune.add_argument(
        "--technique",
        dest="techniques",
        action="append",
        default=[],
        help="limit the search to these (repeat)",
    )
    tune.add_argument(
        "--include-compile", action="store_true", help="also try torch_compile (slow to prepare)"
    )
    floor = tuned.floor
    for flag, words in (
        ("--min-psnr", f"dB against the baseline image (default {floor.min_psnr:g})"),
        ("--min-ssim", f"against the baseline image (default {floor.min_ssim:g})"),
        ("--fidelity-drop", f"tiny-shapes: max prompt-fidelity loss (default {floor.fidelity_drop:g})"),
    ):
        tune.add_argument(flag, type=float, help=words)
    tune.add_argument(
        "--confirm-rounds",
        type=int,
        help=f"interleaved baseline/winner rounds (default {tuned.confirm_rounds})",
    )
    for name, text in (
        ("profile", "where the time of one denoising step goes (logged as a run)"),
        ("estimate", "will it fit: the peak memory a generate should reach, before it runs"),
    ):
        one = sub.add_parser(name, help=text)
        request_args(one)
        optimizations_arg(one)
    hist = sub.add_parser("history", help="runs from the log")
    for flag in ("--model", "--device", "--status", "--technique", "--since", "--until"):
        hist.add_argument(flag)
    hist.add_argument("--limit", type=int, default=20)
    hist.add_argument("--json", action="store_true")
    show = sub.add_parser("show", help="the settings and figures a PNG carries (the studio's or A1111's)")
    show.add_argument("image", help="a PNG file")
    show.add_argument("--json", action="store_true")
    add_shard_parser(sub)
    add_packages_parser(sub)
    add_cards_parser(sub)
    add_combinations_parser(sub)
    add_timeline_parser(sub)
    add_loras_parser(sub)
    return parser


def cmd_system(args: argparse.Namespace) -> int:
    from studio import devices
    from studio.report import machine_rows

    info = {
        "hardware": devices.detect().summary(),
        "versions": settings.versions(),
        "database": str(settings.db_path()),
    }
    rows = [*machine_rows(info["hardware"], info["versions"]), ("Run log", info["database"])]
    emit(info, args.json, "\n".join(f"{label + ':':<11} {value}" for label, value in rows))
    return 0


def cmd_optimizations(args: argparse.Namespace) -> int:
    from pipelines.registry import resolve
    from studio.optimizations import availability

    family = resolve(args.model).family if args.model else None
    rows = availability(family=family)
    only = {r["name"]: f" (on {r['works_on']})" if family is None and r["works_on"] else "" for r in rows}
    text = "\n".join(
        f"{r['name']:28} {r['group']:9} {r['unavailable'] or 'available'}{only[r['name']]}" for r in rows
    )
    emit(rows, args.json, text)
    return 0


def cmd_generate(args: argparse.Namespace) -> int:
    from studio import report
    from studio.engine import Studio
    from studio.request import request_from_args

    request = request_from_args(args, args.optimizations)
    result = Studio().generate(request, warmup=args.warmup or 0, rounds=args.rounds or 1)
    data = report.single_record(result)
    first = data["first_call_s"] is not None or data["first_call_phase"]
    text = (
        f"run {data['run_id']}: {data['config']}"
        + "".join(f" {report.lora_tags(data['loras'])}" if data["loras"] else "")
        + f" {report.seconds(data['latency_s'])}, "
        + (f"first call {report.first_call(data)}, " if first else "")
        + f"peak {report.memory(data)} -> {data['image_path']}"
    )
    for warning in result.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    emit(data, args.json, text)
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from studio import report
    from studio.engine import Studio
    from studio.request import request_from_args
    from studio.request.axes import parse_axes
    from studio.sweeps import xy
    from studio.sweeps.compare import DEFAULT_ROUNDS, run_compare

    request = request_from_args(args)
    warmup = 1 if args.warmup is None else args.warmup
    rounds = DEFAULT_ROUNDS if args.rounds is None else args.rounds
    axis, y_axis = parse_axes(args.axis, args.values, args.y_axis, args.y_values, request)
    if axis is not None:
        result = xy.run_xy(Studio(), request, args.config, axis, y_axis, warmup=warmup, rounds=rounds)
        emit(xy.as_json(result), args.json, xy.markdown(result))
        return 0
    result = run_compare(Studio(), request, args.config, warmup=warmup, rounds=rounds)
    emit({"group_id": result.group_id, "rows": result.records}, args.json, report.markdown(result.records))
    return 0


def cmd_autotune(args: argparse.Namespace) -> int:
    from studio.engine import Studio
    from studio.request import request_from_args
    from studio.sweeps import autotune

    request = request_from_args(args)
    settings = AutotuneSettings.of(vars(args))
    result = autotune.run_with(Studio(), request, settings)
    emit(autotune.as_json(result), args.json, autotune.markdown(result))
    return 0


def cmd_profile(args: argparse.Namespace) -> int:
    from studio.engine import Studio
    from studio.report import profile_text
    from studio.request import request_from_args
    from studio.request.profile_request import validate_profile

    # refused before the run log is opened
    request = validate_profile(request_from_args(args, args.optimizations))
    run = Studio().profile(request)
    for warning in run.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    data = run.as_json()
    emit(data, args.json, f"run {run.run_id}: {profile_text.markdown(data)}")
    return 0


def cmd_estimate(args: argparse.Namespace) -> int:
    from studio.cards import measured_first_calls
    from studio.engine import Studio
    from studio.request import request_from_args

    request = request_from_args(args, args.optimizations)
    studio = Studio()
    found = {
        **studio.will_it_fit(request),
        "first_call": measured_first_calls.sentence(studio, request),
    }
    emit(found, args.json, " ".join(filter(None, [found["sentence"], found["first_call"]])))
    return 0


def cmd_history(args: argparse.Namespace) -> int:
    from studio import report
    from studio.engine import Studio
    from studio.request import HistoryFilter

    rows = Studio().history(HistoryFilter.of(vars(args)))
    records = [report.log_record(r) for r in rows]
    first = (
        ("Run", lambda r: str(r["run_id"])),
        ("When", lambda r: (r["created_at"] or "")[:19].replace("T", " ")),
        ("Model", lambda r: r["model"]),
    )
    emit(records, args.json, report.markdown(records, first) if records else "no runs")
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    from studio.report import image_metadata

    found = image_metadata.read(args.image)
    if found.settings is None:
        print(found.message, file=sys.stderr)
        return 1
    data = {"source": found.source, "message": found.message, "settings": found.settings}
    emit(data, args.json, image_metadata.describe(found))
    return 0


COMMANDS = {
    "system": cmd_system,
    "optimizations": cmd_optimizations,
    "generate": cmd_generate,
    "compare": cmd_compare,
    "autotune": cmd_autotune,
    "profile": cmd_profile,
    "history": cmd_history,
    "show": cmd_show,
    "estimate": cmd_estimate,
    "shard": cmd_shard,
    "packages": cmd_packages,
    "cards": cmd_cards,
    "combinations": cmd_combinations,
    "timeline": cmd_timeline,
    "loras": cmd_loras,
}


# Commands that import neither diffusers nor transformers: nothing to quiet, and importing them to quiet them
# would cost seconds.
NO_LIBRARIES = frozenset({"system", "show"})


def quiet_libraries() -> None:
    """Keep diffusers' and transformers' progress bars and their advice about optional packages (torchvision)
    off stderr: the CLI's stderr carries its own warnings and errors."""
    import diffusers.utils.logging as diffusers_logging
    import transformers.utils.logging as transformers_logging

    diffusers_logging.disable_progress_bar()
    transformers_logging.disable_progress_bar()
    transformers_logging.set_verbosity_error()


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )
    if not args.verbose and args.command not in NO_LIBRARIES:
        quiet_libraries()
    try:
        with results_only_on_stdout():
            return COMMANDS[args.command](args)
    except StudioError as exc:
        print(f"error: {describe(exc)}", file=sys.stderr)
        return 2
