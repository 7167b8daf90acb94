"""The lossy search: the auto-tuner within a card run's time budget for one model.

The budget per model covers the fixed configurations' first calls (a compile of a minute on a CPU, in the
Compare before the search: `spent_s`) and the search: the search gets what is left. It bounds the search
twice. Before it starts, the suite's techniques are taken in order while the
planned work fits: each grid point's warm-up and screening calls at the baseline's measured seconds per call,
plus what converting or calibrating is assumed to cost (`PREP_CALLS`, in baseline calls), a combination trial
per technique after the first and the confirmation. While it runs, a deadline stops it: then the search
ends with a sentence and no winner, and the card run goes on with what it measured.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from studio.errors import Cancelled, StudioError
from studio.measure.bench import StopFn
from studio.request import GenerationRequest
from studio.request.quality_floor import Floor
from studio.sweeps import autotune
from studio.sweeps.autotune_search_space import check_pool, grid

FLOOR = Floor()  # the auto-tuner's own default floor
PREP_CALLS = {"openvino": 4}  # assumed first-call cost per grid point (conversion, calibration), in calls
SCREEN_ROUNDS = 2  # the auto-tuner's screening and confirmation rounds (at most the card run's rounds)


@dataclass
class Deadline:
    """A `should_stop` that also stops once `budget_s` have passed since it was made; `expired` says
    whether the budget (not the user) stopped the run."""

    budget_s: float
    user_stop: StopFn | None = None
    start: float = field(default_factory=time.monotonic)
    expired: bool = False

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def __call__(self) -> bool | str | None:
        stop = self.user_stop() if self.user_stop is not None else None
        if stop:
            return stop
        if self.elapsed() > self.budget_s:
            self.expired = True
            return f"the card run's budget of {self.budget_s:g} s for the auto-tuner ran out"
        return None


@dataclass
class Plan:
    techniques: list[str]
    left_out: list[str]  # "name: why" for each technique of the suite not searched
    planned_s: float


def plan(
    names: tuple[str, ...],
    request: GenerationRequest,
    budget_s: float,
    call_s: float,
    warmup: int,
    screen: int,
) -> Plan:
    """The techniques of `names` (in order) whose planned work fits `budget_s`, at `call_s` per call."""
    per_point = warmup + screen
    planned = (per_point + 2 * per_point) * call_s  # the baseline's screening calls and the confirmation
    chosen: list[str] = []
    left: list[str] = []
    for name in names:
        try:
            check_pool(request, [name], include_compile=False)
        except StudioError as exc:
            left.append(f"{name}: {exc}")
            continue
        cost = len(grid(name, request)) * (per_point + PREP_CALLS.get(name, 0)) * call_s
        cost += 3 * per_point * call_s if chosen else 0.0  # its trial in combination with the best so far
        if planned + cost <= budget_s:
            chosen.append(name)
            planned += cost
        else:
            left.append(f"{name}: about {cost:.0f} s more than the budget leaves")
    return Plan(chosen, left, round(planned, 1))


def _about(chosen: Plan, budget_s: float, spent_s: float, screen: int) -> dict[str, Any]:
    """What the card says about the search before it runs."""
    return {
        "kind": "autotune",
        "budget_s": budget_s,
        "first_calls_s": round(spent_s, 1),
        "techniques": chosen.techniques,
        "left_out": chosen.left_out,
        "planned_s": chosen.planned_s,
        "floor": vars(FLOOR),
        "screen_rounds": screen,
        "group_id": None,
        "summary": None,
        "seconds": None,
    }


def lossy_search(
    studio: Any,
    request: GenerationRequest,
    names: tuple[str, ...],
    *,
    budget_s: float,
    call_s: float,
    warmup: int,
    rounds: int,
    keep_db: float,
    spent_s: float = 0.0,
    progress: Callable[[float, str], None] | None = None,
    should_stop: StopFn | None = None,
) -> tuple[list[str], dict[str, Any]]:
    """Run the auto-tuner on the planned techniques within what `budget_s` leaves after `spent_s` (the fixed
    configurations' first calls): the configurations to measure again (`to_confirm`; none when it found
    nothing) and what the card says about the search."""
    screen = min(SCREEN_ROUNDS, rounds)
    left = max(0.0, budget_s - spent_s)
    chosen = plan(names, request, budget_s=left, call_s=call_s, warmup=warmup, screen=screen)
    about = _about(chosen, budget_s, spent_s, screen)
    if not chosen.techniques:
        about["summary"] = (
            f"No technique's search fits what the budget of {budget_s:g} s left ({left:.0f} s) after the "
            f"fixed configurations' first calls ({spent_s:.0f} s): nothing searched."
        )
        return [], about
    deadline = Deadline(left, should_stop)
    tick = (
        (lambda d, t, label: progress(min(1.0, deadline.elapsed() / left), f"auto-tune: {label}"))
        if progress
        else None
    )
    try:
        found = autotune.run_autotune(
            studio,
            request,
            floor=FLOOR,
            techniques=chosen.techniques,
            warmup=warmup,
            rounds=screen,
            confirm_rounds=screen,
            progress=tick,
            should_stop=deadline,
        )
    except Cancelled as exc:
        if not deadline.expired:
            raise
        best = fastest_within_floor(getattr(exc, "records", None) or [], keep_db)
        about.update(seconds=round(deadline.elapsed(), 1), summary=_ran_out(budget_s, spent_s, best))
        return ([best] if best else []), about
    except StudioError as exc:  # refused before it ran (too long an estimate, copies that do not fit)
        about.update(seconds=round(deadline.elapsed(), 1), summary=f"The auto-tuner could not run: {exc}")
        return [], about
    about.update(
        group_id=found.group_id, summary=autotune.summary(found), seconds=round(deadline.elapsed(), 1)
    )
    return to_confirm(found, keep_db), about


def to_confirm(found: autotune.AutotuneResult, keep_db: float) -> list[str]:
    """What the card run measures again of an auto-tune: its winner, and unless the winner changes the
    image, the fastest configuration that does, measured faster than the baseline and within the floor (the
    auto-tuner looks for the fastest within its floor, which may keep the math)."""
    winner = found.winner_label if found.winner is not None else None
    psnr = (found.confirmation or {}).get("psnr_db")
    if winner is not None and psnr is not None and psnr < keep_db:
        return [winner]
    lossy = fastest_within_floor(found.rows, keep_db)
    return [c for c in dict.fromkeys((winner, lossy)) if c is not None]


def fastest_within_floor(rows: list[dict[str, Any]], below_db: float | None = None) -> str | None:
    """Of an auto-tune's rows (a stopped one's so far), the fastest configuration measured faster than the
    baseline and within the floor (with `below_db`: one whose image is further than that from the
    baseline's, so it changes the image), or None."""
    ok = [
        r
        for r in rows
        if r.get("status") == "ok"
        and r.get("stage") not in (None, "baseline")
        and r.get("verdict") == "faster"
        and r.get("floor") is None
        and (below_db is None or (r.get("psnr_db") is not None and r["psnr_db"] < below_db))
    ]
    return max(ok, key=lambda r: r.get("speedup") or 0.0)["config"] if ok else None


def _ran_out(budget_s: float, spent_s: float, best: str | None) -> str:
    left = f" ({budget_s - spent_s:.3g} s left after the fixed configurations' first calls)"
    after = left if spent_s else ""
    said = f"The auto-tuner ran past its budget of {budget_s:g} s{after} and was stopped"
    if best is not None:
        return (
            f"{said}: the fastest configuration it had measured within the floor, {best}, was measured "
            "again with the others (not confirmed by the auto-tuner)."
        )
    return (
        f"{said} before it measured a configuration faster within the floor. Give it more (--budget-s) or "
        "name configurations (--configs)."
    )
