"""`python -m studio timeline`: did it get slower? One configuration's logged runs on this machine, grouped by
the library versions they ran under, each upgrade marked and judged (`studio.engine.speed_timeline`); `--json`
for scripts, and by default a Markdown block to paste into an issue.

Registered in `studio/cli/__init__.py` with `add_timeline_parser(sub)` and `COMMANDS["timeline"] =
cmd_timeline`.
"""

from __future__ import annotations

import argparse
from typing import Any

from studio.cli.output import emit


def add_timeline_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the `timeline` command to the CLI's subparsers.

    Args:
        subparsers: what `ArgumentParser.add_subparsers()` returned.
    """
    p = subparsers.add_parser(
        "timeline", help="a configuration's speed across library versions, from the log"
    )
    p.add_argument("--model", default="tiny-shapes", help="registry id, hub id or local directory")
    p.add_argument(
        "--config", default="baseline", help="as Compare writes it: 'baseline', 'bf16+channels_last', …"
    )
    for flag in ("--steps", "--width", "--height"):
        p.add_argument(flag, type=int, help="default: the model's own")
    p.add_argument("--batch", type=int, default=1, help="images per prompt (default 1)")
    p.add_argument("--device", default="auto", help="auto (the first GPU, else the CPU), cpu, cuda:N or mps")
    p.add_argument("--json", action="store_true", help="print JSON")
    return p


def cmd_timeline(args: argparse.Namespace) -> int:
    from studio import devices
    from studio.engine import Studio, speed_timeline

    request = speed_timeline.timeline_request(
        model=args.model,
        config=args.config,
        steps=args.steps,
        width=args.width,
        height=args.height,
        batch=args.batch,
        device=args.device,
    )
    hardware = devices.detect().summary()
    eras = Studio().timeline(request, hardware)
    machine = speed_timeline.machine_words(hardware)
    if not eras:
        text = (
            f"No finished run of {request.config_label} at this size on this machine is in the run log yet."
        )
    else:
        text = speed_timeline.markdown(request, eras, machine)
    emit(
        {"machine": machine, "config": request.config_label, "eras": [e.as_json() for e in eras]},
        args.json,
        text,
    )
    return 0
