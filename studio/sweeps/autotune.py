"""Auto-tune: the fastest configuration that keeps the image within a quality floor, answered by measurement.

1. the baseline and every candidate alone (techniques with settings once per point of `GRID`), interleaved;
   a candidate survives if it is faster beyond noise and its image meets the floor (PSNR and SSIM against the
   baseline, and for tiny-shapes prompt fidelity no more than `fidelity_drop` below the baseline's); only the
   best grid point of each technique survives;
2. survivors are added one at a time, fastest first, to the best configuration so far, each trial timed
   interleaved with the baseline and the current best; it is kept only if it beats the current best beyond
   noise and still meets the floor;
3. the winner is confirmed against the baseline in its own interleaved rounds. The confirmation decides: only
   a winner it measured faster beyond noise is offered; otherwise the answer is that nothing here beats the
   baseline beyond noise.
Everything measured is one `autotune` group in the run log. What may be tried (the candidates, `GRID`) is in
studio.sweeps.autotune_search_space, the floor in studio.request.quality_floor; this module runs the search
and words its answer.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from studio import report
from studio.engine import Studio
from studio.errors import Cancelled
from studio.measure import protocol
from studio.measure.bench import StopFn
from studio.request import AutotuneSettings, GenerationRequest
from studio.request.quality_floor import Floor
from studio.sweeps.autotune_search_space import GRID, Candidate, check_pool, combinable, grid
from studio.sweeps.compare import records_of
from studio.sweeps.runner import Entry, Progress, SweepCancelled, SweepResult, run_sweep


@dataclass
class AutotuneResult:
    group_id: int
    rows: list[dict[str, Any]]  # every configuration measured, shared vocabulary + stage and floor
    winner: Candidate | None  # None: nothing beat the baseline beyond noise
    confirmation: dict[str, Any] | None
    pareto_quality: list[str] = field(default_factory=list)
    pareto_memory: list[str] = field(default_factory=list)

    @property
    def winner_label(self) -> str:
        return self.confirmation["config"] if self.winner and self.confirmation else "baseline"


def pareto(rows: list[dict[str, Any]], key: str, better_high: bool) -> list[str]:
    """Configurations no other one beats on both latency and `key` (ok rows that have both values)."""
    points = [
        (r["latency_s"], -r[key] if better_high else r[key], r["config"])
        for r in rows
        if r["status"] == "ok" and r.get(key) is not None
    ]
    return [
        name
        for lat, val, name in points
        if not any(l2 <= lat and v2 <= val and (l2, v2) != (lat, val) for l2, v2, _ in points)
    ]


TUNED = AutotuneSettings()  # the defaults of `run_autotune`'s options: the settings' own
STAGE_TITLES = {
    "single": "measuring each technique alone",
    "combination": "trying a combination",
    "confirmation": "confirming the winner",
}


class _Search:
    """The state of one auto-tune: its group, the rows so far, the floor and the baseline's fidelity."""

    def __init__(
        self,
        studio: Studio,
        request: GenerationRequest,
        floor: Floor,
        warmup: int,
        rounds: int,
        group_id: int,
        progress: Progress | None,
        should_stop: StopFn | None,
    ):
        self.studio, self.request, self.floor, self.warmup, self.rounds = (
            studio,
            request,
            floor,
            warmup,
            rounds,
        )
        self.group_id, self.progress, self.should_stop = group_id, progress, should_stop
        self.rows: list[dict[str, Any]] = []
        self.base_fidelity: float | None = None

    def sweep(
        self, stage: str, configs: list[Candidate], rounds: int, title: str | None = None
    ) -> tuple[SweepResult, list[dict[str, Any]]]:
        """One stage's sweep (the baseline first), its progress said as `title` (default: the stage's
        `STAGE_TITLES`); its records join the rows. A cancel puts the rows so far, this stage's partial ones
        too, in the error's `records`."""
        entries = [Entry("baseline", self.request)]
        entries += [Entry(c.request(self.request).config_label, c.request(self.request)) for c in configs]
        said = title or STAGE_TITLES[stage]
        try:
            sweep = run_sweep(
                self.studio,
                "autotune",
                entries,
                warmup=self.warmup,
                rounds=rounds,
                group_id=self.group_id,
                progress=self._told(said),
                should_stop=self.should_stop,
                max_configs=None,
            )
        except SweepCancelled as exc:
            exc.records, exc.stage = self.rows + self._keep(stage, records_of(exc.partial)), said
            raise
        records = records_of(sweep)
        self.rows += self._keep(stage, records)
        return sweep, records[1:]

    def _told(self, said: str) -> Progress | None:
        """The search's progress, each report prefixed with what the stage does."""
        progress = self.progress
        if progress is None:
            return None
        return lambda done, calls, where: progress(done, calls, f"{said}, {where}")

    def _keep(self, stage: str, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """A stage's records with their stage and quality floor: the baseline's only in the first stage."""
        if self.base_fidelity is None and records[0]["status"] == "ok":
            self.base_fidelity = records[0]["fidelity"]
        for record in records:
            if record["status"] == "ok" and record["verdict"] != "baseline":
                record["floor"] = self.floor.check(record, self.base_fidelity)
            record["stage"] = "baseline" if record is records[0] else stage
        return records if stage == "single" else records[1:]

    def ok(self, record: dict[str, Any]) -> bool:
        return (
            record["status"] == "ok" and record["verdict"] == protocol.FASTER and record.get("floor") is None
        )


def run_autotune(
    studio: Studio,
    request: GenerationRequest,
    *,
    floor: Floor = TUNED.floor,
    techniques: list[str] | None = None,
    include_compile: bool = False,
    warmup: int = TUNED.warmup,
    rounds: int = TUNED.rounds,
    confirm_rounds: int = TUNED.confirm_rounds,
    progress: Progress | None = None,
    should_stop: StopFn | None = None,
) -> AutotuneResult:
    """Search, measure and confirm; one `autotune` group in the run log.

    Raises:
        SweepCancelled: `should_stop` said stop; its `records` are the rows measured until then (the stage
            it stopped in with what it had), its `stage` the stage.
    """
    pool = check_pool(request, techniques, include_compile)
    settings = {
        "techniques": pool,
        "grid": {k: v for k, v in GRID.items() if k in pool},
        "floor": vars(floor),
    }
    settings.update(warmup=warmup, rounds=rounds, confirm_rounds=confirm_rounds)
    group_id = studio.runlog.start_group(
        "autotune", model=request.model, prompt=request.prompt, seed=request.seed, settings=settings
    )
    search = _Search(
        studio,
        request,
        floor,
        warmup=warmup,
        rounds=rounds,
        group_id=group_id,
        progress=progress,
        should_stop=should_stop,
    )
    try:
        winner, confirmation = _search(search, pool, confirm_rounds)
    except BaseException as exc:
        if isinstance(exc, SweepCancelled):
            _judged(exc.records)
        studio.runlog.finish_group(
            group_id, "cancelled" if isinstance(exc, Cancelled) else "failed", str(exc)
        )
        raise
    studio.runlog.finish_group(group_id, "ok")
    rows = _judged(search.rows)
    ok = [r for r in rows if r["meets_floor"]]
    return AutotuneResult(
        group_id=group_id,
        rows=rows,
        winner=winner,
        confirmation=confirmation,
        pareto_quality=pareto(ok, "psnr_db", better_high=True),
        pareto_memory=pareto(rows, "peak_memory_mb", False),
    )


def run_with(
    studio: Studio,
    request: GenerationRequest,
    settings: AutotuneSettings,
    *,
    progress: Progress | None = None,
    should_stop: StopFn | None = None,
) -> AutotuneResult:
    """`run_autotune` with the options a face checked (`studio.request.AutotuneSettings`, built by name)."""
    return run_autotune(
        studio,
        request,
        floor=settings.floor,
        techniques=list(settings.techniques) if settings.techniques else None,
        include_compile=settings.include_compile,
        warmup=settings.warmup,
        rounds=settings.rounds,
        confirm_rounds=settings.confirm_rounds,
        progress=progress,
        should_stop=should_stop,
    )


def _judged(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows, each with `meets_floor`: measured (all its rounds) and within the quality floor."""
    for row in rows:
        row["meets_floor"] = row["status"] == "ok" and row.get("floor") is None
    return rows


def _search(search: _Search, pool: list[str], confirm_rounds: int) -> tuple[Candidate | None, dict | None]:
    singles = [Candidate((n,), {n: point}) for n in pool for point in grid(n, search.request)]
    singles = [dataclasses.replace(c, settings={k: v for k, v in c.settings.items() if v}) for c in singles]
    _, records = search.sweep("single", singles, search.rounds)
    best_of: dict[str, tuple[float, Candidate]] = {}
    for cand, rec in zip(singles, records, strict=True):
        if search.ok(rec) and rec["speedup"] > best_of.get(cand.optimizations[0], (0.0, cand))[0]:
            best_of[cand.optimizations[0]] = (rec["speedup"], cand)
    survivors = [c for _, c in sorted(best_of.values(), key=lambda sc: -sc[0])]
    if not survivors:
        return None, None
    best = survivors[0]
    for number, extra in enumerate(survivors[1:], 1):
        trial = best.plus(extra)
        if not combinable(trial):
            continue
        title = f"trying combination {number} of {len(survivors) - 1}"
        sweep, (best_rec, trial_rec) = search.sweep("combination", [best, trial], search.rounds, title)
        both_ran = trial_rec["status"] == best_rec["status"] == "ok"
        versus = (
            protocol.speedup(
                sweep.entries[1].result.metrics["latency_all"], sweep.entries[2].result.metrics["latency_all"]
            )
            if both_ran
            else None
        )
        if versus is not None and versus.verdict == protocol.FASTER and trial_rec.get("floor") is None:
            best = trial
    _, (confirmed,) = search.sweep("confirmation", [best], max(1, confirm_rounds))
    return (best if search.ok(confirmed) else None), confirmed


def summary(result: AutotuneResult) -> str:
    """The outcome in one or two sentences, with the range and the verdict."""
    c = result.confirmation
    if c is None:
        return (
            "Nothing here beats the baseline beyond noise while meeting the quality floor: keep the baseline."
        )
    if c["status"] != "ok":
        return (
            f"Nothing to offer: the best candidate, {c['config']}, failed in its confirmation "
            f"({c['error']}). "
            "Keep the baseline."
        )
    measured = f"{report.ratio(c)} over {c['rounds']} interleaved rounds against the baseline"
    if result.winner is None:
        return (
            f"Nothing here beats the baseline beyond noise: the best candidate, {c['config']}, measured "
            f"{measured} in the confirmation ({c['verdict']}). Keep the baseline."
        )
    return f"Fastest configuration that meets the floor: {c['config']}, {measured} ({c['verdict']})."


STAGE_COLUMNS = (("Stage", lambda r: r.get("stage", "")),)


def markdown(result: AutotuneResult) -> str:
    """The answer, then every configuration measured with its stage and whether it met the floor."""
    table = report.markdown(result.rows, STAGE_COLUMNS)
    return f"{summary(result)}\n\n{table}"


def as_json(result: AutotuneResult) -> dict[str, Any]:
    """The result as plain JSON, in the shared vocabulary."""
    winner = (
        None
        if result.winner is None
        else {"techniques": list(result.winner.optimizations), "settings": result.winner.settings}
    )
    return {
        "group_id": result.group_id,
        "winner": winner,
        "winner_label": result.winner_label,
        "summary": summary(result),
        "confirmation": result.confirmation,
        "rows": result.rows,
        "pareto_quality": result.pareto_quality,
        "pareto_memory": result.pareto_memory,
    }
