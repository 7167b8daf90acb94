"""What combines with what: every pair of the chosen techniques on one model and device, as a table whose
cells (a pair; on the diagonal, the technique alone) are refused before running, with the sentence the
request's checks give from the registry; failed at run time, with the error; or measured: speedup and PSNR
against the baseline, every runnable cell in ONE Compare sweep (`run_sweep`, a `combinations` group in the run
log), timed in the same interleaved rounds against the same baseline.

Bounded before anything runs: cells counted, time estimated (calls at the model's assumed cost, plus the first
call of each technique that builds something then, as logged here or `PREPARE_SETUPS` model setups), a run
over `STUDIO_MAX_REQUEST_S` refused; of every technique, those that build on their first call are left out,
most costly first, until the rest fits (`include_compile`: auto); `max_cells` caps the cells measured.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pipelines.registry import cost_of
from studio import devices
from studio.engine import Studio
from studio.errors import ConflictError, StudioError, UnavailableError, ValidationError
from studio.measure.bench import StopFn
from studio.optimizations import REGISTRY, get, unavailable_reason
from studio.request import GenerationRequest, validate_counts, with_config
from studio.request.sweep_limits import CombinationsOptions, estimated_seconds, max_request_seconds
from studio.sweeps.compare import records_of
from studio.sweeps.runner import Entry, Progress, SweepCancelled, run_sweep

DEFAULT_ROUNDS = 3
PREPARE_SETUPS = 10  # a first call's build, where none was logged: this many times the model's assumed setup
FIGURES = "status run_id speedup speedup_min speedup_max verdict psnr_db ssim latency_s".split()
Known = Callable[[GenerationRequest], float | None]  # a configuration's logged first call, or None


def prepares(name: str) -> bool:
    """Whether technique `name` builds something on its first call (a trace, compile, conversion or
    calibration): the auto-tuner's slow-to-prepare ones and the irreversible speed and precision ones."""
    opt = get(name)
    return opt.autotune == "slow_to_prepare" or (not opt.reversible and opt.group != "memory")


@dataclass(frozen=True)
class Cell:
    """One pair (`row` and `column`; the same name: the technique alone) and what became of it (with a
    measured cell, its record: the figures given with it are `FIGURES`)."""

    row: str
    column: str
    config: str
    outcome: str  # measured, refused, failed, cancelled, left out, or planned (before it runs)
    reason: str | None = None
    kind: str | None = None  # a refusal's kind in a word or two: conflict, not here, precision, settings
    record: dict[str, Any] | None = None
    request: GenerationRequest | None = field(default=None, repr=False, compare=False)

    def text(self) -> str:
        """The cell as a table shows it: '×1.42 / 38.0 dB' (≈: within noise), 'refused: conflict',
        'failed: RuntimeError', 'cancelled', 'left out'."""
        if self.outcome == "measured" and (r := self.record) is not None:
            sign = "≈" if r.get("verdict") == "within noise" else "×"
            speed = f"{sign}{r['speedup']:.2f}" if r.get("speedup") is not None else "–"
            image = "identical" if r.get("psnr_db") is None and r.get("ssim") is not None else "–"
            image = f"{r['psnr_db']:.1f} dB" if r.get("psnr_db") is not None else image
            return f"{speed} / {image}"
        if self.outcome in ("refused", "failed"):
            return f"{self.outcome}: {self.kind}"
        return self.outcome

    def as_json(self) -> dict[str, Any]:
        own = {"row": self.row, "column": self.column, "config": self.config, "outcome": self.outcome}
        figures = {k: (self.record or {}).get(k) for k in FIGURES}
        return {**own, "text": self.text(), "reason": self.reason, **figures}


@dataclass(frozen=True)
class CombinationsPlan:
    """The cells before anything runs (pairs in registry order), their estimate, the techniques left out."""

    request: GenerationRequest  # the baseline
    techniques: tuple[str, ...]
    cells: tuple[Cell, ...]
    left_out: dict[str, str]
    estimate_s: float
    warmup: int
    rounds: int


@dataclass(frozen=True)
class CombinationsResult:
    plan: CombinationsPlan
    cells: tuple[Cell, ...]
    baseline: dict[str, Any] | None  # the baseline's record (None: nothing ran)
    group_id: int | None
    stopped: str | None = None  # a cancelled run: where it stopped


def _refusal(exc: StudioError) -> str:
    """A refusal's kind, in a word or two."""
    if isinstance(exc, UnavailableError):
        return "settings" if "setting" in str(exc) else "not here"
    if isinstance(exc, ConflictError):
        return "conflict"
    return "precision" if " supports " in str(exc) else "invalid"


def pair_cell(request: GenerationRequest, row: str, column: str) -> Cell:
    """A pair as the request's checks see it: planned with its request, or refused with their sentence (a
    conflict's says which technique's declaration refuses it: where to change it)."""
    names = [row] if row == column else [row, column]
    try:
        configured = with_config(request, names)
    except StudioError as exc:  # the refusal is this cell's answer, shown with its sentence
        by = [x for x, y in itertools.permutations(names, 2) if y in get(x).conflicts]
        reason = (
            f"{exc} (declared by {' and '.join(by)})" if isinstance(exc, ConflictError) and by else str(exc)
        )
        return Cell(row, column, "+".join(names), "refused", reason=reason, kind=_refusal(exc))
    return Cell(row, column, configured.config_label, "planned", request=configured)


def speed_and_precision(request: GenerationRequest) -> tuple[list[str], dict[str, str]]:
    """The registry's speed and precision techniques that can run for `request` here (default settings), and
    the reason of each that cannot."""
    hw, device, family = devices.detect(), request.device, request.spec.family
    why = {
        n: unavailable_reason(o, hw, device, family) or o.settings_unavailable({}, device, request.dtype_name)
        for n, o in REGISTRY.items()
        if o.group != "memory"
    }
    return [n for n, reason in why.items() if not reason], {n: reason for n, reason in why.items() if reason}


def _chosen(request: GenerationRequest, techniques: Any) -> tuple[list[str], dict[str, str], bool]:
    """The techniques asked for in registry order (every speed and precision one that can run here when none
    is named), the ones left out with why, and whether they were named."""
    if not techniques:
        chosen, left = speed_and_precision(request)
        return chosen, left, False
    names = [techniques] if isinstance(techniques, str) else list(techniques)
    for name in names:
        get(name)
    chosen = [n for n in REGISTRY if n in set(names)]
    if len(chosen) < 2:
        raise ValidationError("Choose at least two techniques to combine (none: every one that runs here).")
    return chosen, {}, True


def cell_seconds(cell: Cell, calls: int, known: Known) -> float:
    """A planned cell's estimated time: its calls at the model's assumed cost, plus the first call's build of
    each technique that prepares something (logged for the cell or the technique alone, else assumed)."""
    request = cell.request
    seconds = estimated_seconds(request, calls)
    slow = [o for o in request.optimizations if prepares(o)]
    if not slow:
        return seconds
    if (logged := known(request)) is not None:
        return seconds + logged
    assumed = PREPARE_SETUPS * cost_of(request.spec).setup
    alone = [known(with_config(request, [o])) for o in slow]
    return seconds + sum(assumed if s is None else s for s in alone)


def plan_combinations(
    request: GenerationRequest,
    techniques: Any = None,
    *,
    include_compile: Any = None,
    max_cells: Any = None,
    warmup: Any = 1,
    rounds: Any = DEFAULT_ROUNDS,
    known: Known = lambda _request: None,
) -> CombinationsPlan:
    """Every pair of `techniques` (none: the registry's speed and precision techniques that can run here)
    for `request`'s model and device, refused or planned, with the estimate; nothing runs.

    Args:
        request: the baseline (its techniques are ignored).
        techniques: names, in any order; the table follows the registry's.
        include_compile: techniques that build on their first call: 'yes', 'no', or 'auto' (True, False,
            None): named ones always, of every technique those the time allows.
        max_cells: the most cells measured (the diagonal's included), None for no cap.
        known: a configuration's logged first call in seconds (`Studio.first_call`), for the estimate.
    """
    base = dataclasses.replace(request, optimizations=(), settings={})
    counts = validate_counts(warmup, rounds)
    options = CombinationsOptions(include_compile=include_compile, max_cells=max_cells)
    include, cap = options.include_compile, options.max_cells
    chosen, left_out, named = _chosen(base, techniques)
    if include == "no":
        left_out |= {n: "builds on its first call (include_compile: no)" for n in chosen if prepares(n)}
        chosen = [n for n in chosen if not prepares(n)]
    calls = counts.warmup + counts.rounds
    cells = [pair_cell(base, a, b) for a, b in itertools.combinations_with_replacement(chosen, 2)]
    cells.sort(key=lambda c: c.row != c.column)  # each technique alone first, then the pairs
    cost = {c.config: cell_seconds(c, calls, known) for c in cells if c.outcome == "planned"}
    cost["baseline"] = estimated_seconds(base, calls)
    if include == "auto" and not named:
        cells = _fit(cells, chosen, cost, left_out)
    cells = _capped(cells, cap)
    total = sum(cost.get(c.config, 0.0) for c in cells if c.outcome == "planned") + cost["baseline"]
    if total > max_request_seconds():
        planned = [c for c in cells if c.outcome == "planned"]
        slow = sum(1 for c in planned if any(prepares(o) for o in c.request.optimizations))
        raise ValidationError(
            f"These combinations would take about {total / 60:.0f} min ({len(planned)} cells measured, "
            f"{slow} of them building on their first call; {calls} calls each, {base.steps} steps at "
            f"{base.width}x{base.height}); the limit is {max_request_seconds() / 60:.0f} min "
            "(STUDIO_MAX_REQUEST_S). Choose fewer techniques, cap the cells (max_cells), or use fewer rounds "
            "or steps, or a smaller size."
        )
    return CombinationsPlan(
        request=base,
        techniques=tuple(chosen),
        cells=tuple(cells),
        left_out=left_out,
        estimate_s=total,
        warmup=counts.warmup,
        rounds=counts.rounds,
    )


def _fit(
    cells: list[Cell], chosen: list[str], cost: dict[str, float], left_out: dict[str, str]
) -> list[Cell]:
    """The cells without the techniques that build on their first call, most costly first, until the rest
    fits in the request limit; each one left out in `left_out` with why (`chosen` loses it too)."""
    limit = max_request_seconds()
    while sum(cost.get(c.config, 0.0) for c in cells) + cost["baseline"] > limit:
        mine = {n: [c for c in cells if n in (c.row, c.column)] for n in chosen if prepares(n)}
        if not mine:
            return cells
        seconds = {n: sum(cost.get(c.config, 0.0) for c in found) for n, found in mine.items()}
        worst = max(seconds, key=seconds.__getitem__)
        cells = [c for c in cells if c not in mine[worst]]
        chosen.remove(worst)
        left_out[worst] = (
            f"builds on its first call: its cells would add about {seconds[worst] / 60:.0f} min, over the "
            f"{limit / 60:.0f} min limit (STUDIO_MAX_REQUEST_S); name it, or set include_compile to yes"
        )
    return cells


def _capped(cells: list[Cell], cap: int | None) -> list[Cell]:
    """The cells with those planned beyond the first `cap` left out, saying so."""
    over = {c.config for c in [c for c in cells if c.outcome == "planned"][cap:]} if cap else set()
    note = f"over the cap of {cap} measured cells (max_cells)"
    return [dataclasses.replace(c, outcome="left out", reason=note) if c.config in over else c for c in cells]


def run_combinations(
    studio: Studio,
    plan: CombinationsPlan,
    *,
    progress: Progress | None = None,
    should_stop: StopFn | None = None,
) -> CombinationsResult:
    """Measure the plan's cells in one Compare sweep (`run_sweep`, a `combinations` group) against one
    baseline; a cancelled run keeps what it measured and says where it stopped."""
    todo = [c for c in plan.cells if c.outcome == "planned"]
    if not todo:
        return CombinationsResult(plan, plan.cells, None, None)
    entries = [Entry(plan.request.config_label, plan.request), *(Entry(c.config, c.request) for c in todo)]
    settings = {"techniques": list(plan.techniques), "left_out": plan.left_out}
    stopped = None
    options = {"warmup": plan.warmup, "rounds": plan.rounds, "progress": progress, "should_stop": should_stop}
    try:  # no cap on the configurations: they are the registry's pairs, bounded by `plan_combinations`
        sweep = run_sweep(studio, "combinations", entries, settings=settings, max_configs=None, **options)
    except SweepCancelled as exc:  # what was measured is kept and shown, with where it stopped
        sweep, stopped = exc.partial, exc.summary()
    records = dict(zip([e.label for e in entries], records_of(sweep), strict=True))
    cells = tuple(_settled(c, records.get(c.config)) for c in plan.cells)
    return CombinationsResult(plan, cells, records[entries[0].label], sweep.group_id, stopped)


def _settled(cell: Cell, record: dict[str, Any] | None) -> Cell:
    if record is None:
        return cell
    if record["status"] == "ok":
        return dataclasses.replace(cell, outcome="measured", record=record)
    error = record.get("error") or record["status"]
    head = error.split(":", 1)[0]
    kind = head if head.isidentifier() and head[:1].isupper() else "run error"
    outcome = "failed" if record["status"] == "failed" else "cancelled"
    return dataclasses.replace(cell, outcome=outcome, reason=error, kind=kind, record=record)
