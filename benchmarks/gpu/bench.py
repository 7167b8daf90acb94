"""The GPU benchmark through the studio's engine, section by section, each written to results.json as it is
measured (see `benchmarks.gpu.plan` for the numbers and `benchmarks.gpu.results` for the file).

    python -m benchmarks.gpu [--dry-run] [--out DIR] [--models sd15,sdxl] [--sections ...] [--budget-s S]

Per model, in this order: memory (on a studio of its own, before anything else is on the device),
compute-limit, techniques (and their reverts), ladder; then the speed targets. A section that fails is
recorded with its error and the next one runs; with `--budget-s`, once the budget is spent no new work starts
(without it, everything runs); an interrupt (a time limit) still leaves the targets judged on what was
measured.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from benchmarks.gpu import environment, ladder, limit, memory, report, targets, techniques
from benchmarks.gpu.common import LOADS, new_studio, release
from benchmarks.gpu.plan import ModelPlan, Plan, from_args, parser
from benchmarks.gpu.results import Results
from studio import devices

log = logging.getLogger("benchmarks.gpu")


def header(plan: Plan) -> dict[str, Any]:
    """What results.json says about the run before any figure."""
    numbers = asdict(plan)
    for key in ("out", "work", "deadline"):
        numbers.pop(key)
    return {"dry_run": plan.dry_run, "device": plan.device, "plan": numbers}


def _section(
    plan: Plan, results: Results, name: str, model: ModelPlan, run: Callable[..., Any], *args
) -> None:
    """Run one section (`run(plan, model, *args, results)`); out of time or failing, say so in the results and
    go on."""
    where = f"{name} on {model.model} ({model.role})"
    if plan.left() < 0:
        results.note(f"{where}: not run (out of time)")
        return
    left = plan.left()
    log.info("%s: %s", where, f"{left:.0f} s left" if math.isfinite(left) else "no budget")
    try:
        run(plan, model, *args, results)
    except Exception as exc:  # one section's failure must not cost the others in a one-shot run
        log.exception("%s failed", where)
        results.note(f"{where} failed: {type(exc).__name__}: {exc}")


def run_model(plan: Plan, model: ModelPlan, results: Results) -> None:
    """Every section of one model plan."""
    if "memory" in model.sections:
        _section(plan, results, "memory", model, memory.measure)
    studio = new_studio(plan, f"{model.role}-main")
    for name, run in (
        ("compute-limit", limit.measure),
        ("techniques", techniques.measure),
        ("ladder", ladder.measure),
    ):
        if name in model.sections:
            _section(plan, results, name, model, run, studio)
    del studio
    LOADS.forget()
    release(plan)


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    plan = from_args(args)
    hw = devices.detect()
    if not plan.dry_run and not hw.cuda_functional:
        raise SystemExit(f"No functional CUDA device here ({hw.cuda_reason}); run with --dry-run.")
    results = Results(plan.out, header(plan))
    results.set("environment", environment.collect(plan.device))
    status = "complete"
    try:
        for model in plan.models:
            run_model(plan, model, results)
    except KeyboardInterrupt:
        status = "stopped by the time limit"
        log.warning("interrupted: judging the targets on what was measured")
    targets.judge_all(results)
    if status == "complete" and results.data["notes"]:
        status = "partial"
    results.finish(status)
    report.write(plan.out)
    print(f"results: {plan.out / 'results.json'}, {plan.out / 'results.md'} ({status})")
