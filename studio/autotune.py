"""Auto-tune: the fastest configuration that keeps the image within a quality floor, found by a pruned search.

The search is greedy, not the full product of techniques:

1. the baseline (fp32, nothing applied);
2. every candidate technique alone; a candidate survives if it is faster than the baseline beyond
   noise and its image meets the floor (PSNR and SSIM against the baseline, and for tiny-shapes prompt
   fidelity no more than `fidelity_drop` below the baseline's);
3. survivors are added one at a time, fastest first, to the best configuration so far; an addition
   is kept only if the result is faster beyond noise and still meets the floor;
4. the winner is confirmed against the baseline with interleaved runs (A B A B ...), so drift hits both
   alike, and its speedup is reported with its spread ("within noise" is said out loud).

Every measured configuration is one run of an `autotune` group in the run log. The result also holds
the Pareto fronts: latency vs quality (PSNR) and latency vs peak memory.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from studio import devices
from studio.bench import StopFn
from studio.compare import row_for, verdict
from studio.errors import Cancelled, StudioError, ValidationError
from studio.optimizations import REGISTRY, check_conflicts, unavailable_reason
from studio.service import RunResult, Studio
from studio.validate import AutotuneSettings, GenerationRequest

Progress = Callable[[int, int, str], None]
# Techniques that are never candidates: placement (they trade speed for memory by design), memory-only
# slicing/tiling, the seed documents' slow "original" attention, and thread control (a machine setting).
EXCLUDED = frozenset({"model_cpu_offload", "sequential_cpu_offload", "device_map_balanced", "vae_slicing",
                      "vae_tiling", "attention_slicing", "classic_attention", "threads"})
SLOW_TO_PREPARE = frozenset({"torch_compile", "int8_static"})  # minutes of compilation per configuration on a CPU


@dataclass(frozen=True)
class Floor:
    """The quality a configuration must keep against the baseline's image."""

    min_psnr: float = 30.0
    min_ssim: float = 0.95
    fidelity_drop: float = 0.03  # tiny-shapes: at most this much below the baseline's prompt fidelity

    def check(self, row: dict[str, Any], baseline_fidelity: float | None) -> str | None:
        """Why `row` misses the floor, or None when it meets it."""
        if row["psnr"] is not None and row["psnr"] < self.min_psnr:
            return f"PSNR {row['psnr']:.1f} dB < {self.min_psnr:g}"
        if row["ssim"] is not None and row["ssim"] < self.min_ssim:
            return f"SSIM {row['ssim']:.3f} < {self.min_ssim:g}"
        if baseline_fidelity is not None and row["fidelity"] is not None \
                and row["fidelity"] < baseline_fidelity - self.fidelity_drop - 1e-9:
            return f"prompt fidelity {row['fidelity']:.0%} < baseline {baseline_fidelity:.0%} - {self.fidelity_drop:.0%}"
        return None


@dataclass
class AutotuneResult:
    group_id: int
    rows: list[dict[str, Any]]
    winner: tuple[str, ...]
    confirmation: dict[str, Any]
    pareto_quality: list[str] = field(default_factory=list)
    pareto_memory: list[str] = field(default_factory=list)

    @property
    def winner_label(self) -> str:
        return "+".join(self.winner) or "baseline"


def floor_of(settings: AutotuneSettings) -> Floor:
    return Floor(settings.min_psnr, settings.min_ssim, settings.fidelity_drop)


def candidates(request: GenerationRequest, include_compile: bool = False) -> list[str]:
    """Techniques worth trying for `request` on its device: available here and able to make it faster."""
    hw = devices.detect()
    names = []
    for name, opt in REGISTRY.items():
        if name in EXCLUDED or (name in SLOW_TO_PREPARE and not include_compile):
            continue
        if unavailable_reason(opt, hw, request.device, request.spec.family) is None:
            names.append(name)
    return sorted(names)


def _combinable(opts: tuple[str, ...]) -> bool:
    try:
        check_conflicts(set(opts))
    except StudioError:
        return False
    return True


def pareto(rows: list[dict[str, Any]], key: str, better_high: bool) -> list[str]:
    """Configurations no other one beats on both latency and `key` (ok rows that have both values)."""
    points = [(r["latency_median"], r[key] if not better_high else -min(r[key], 1e9), r["config"])
              for r in rows if r.get("status") == "ok" and r.get(key) is not None]
    front = []
    for lat, val, name in points:
        dominated = any(lat2 <= lat and val2 <= val and (lat2, val2) != (lat, val) for lat2, val2, _ in points)
        if not dominated:
            front.append(name)
    return front


def run_autotune(
    studio: Studio,
    request: GenerationRequest,
    *,
    floor: Floor = Floor(),
    techniques: list[str] | None = None,
    include_compile: bool = False,
    warmup: int = 1,
    repeats: int = 3,
    confirm_rounds: int = 5,
    progress: Progress | None = None,
    should_stop: StopFn | None = None,
) -> AutotuneResult:
    """Search, measure and confirm; one `autotune` group in the run log (settings checked by
    `validate.validate_autotune` at the faces)."""
    pool = sorted(set(techniques)) if techniques else candidates(request, include_compile)
    hw = devices.detect()
    for name in pool:
        if name not in REGISTRY:
            raise ValidationError(f"Unknown technique {name!r} for the auto-tuner.")
        reason = unavailable_reason(REGISTRY[name], hw, request.device, request.spec.family)
        if reason:
            raise ValidationError(f"{reason} Leave it out of the auto-tuner's techniques.")
    group_id = studio.runlog.start_group(
        "autotune", model=request.model, prompt=request.prompt, seed=request.seed,
        settings={"techniques": pool, "floor": vars(floor), "warmup": warmup, "repeats": repeats,
                  "confirm_rounds": confirm_rounds},
    )
    measured: dict[tuple[str, ...], dict[str, Any]] = {}
    rows: list[dict[str, Any]] = []
    total = 1 + 2 * len(pool) + 1
    baseline: RunResult | None = None

    def measure(opts: tuple[str, ...], stage: str) -> dict[str, Any]:
        opts = tuple(sorted(opts))
        if opts in measured:
            return measured[opts]
        if progress:
            progress(len(measured), total, "+".join(opts) or "baseline")
        try:
            result = studio.generate(studio.derive(request, opts), warmup=warmup, repeats=repeats,
                                     group_id=group_id, baseline=baseline, should_stop=should_stop)
        except Cancelled:
            raise
        except StudioError as exc:
            if baseline is None:
                raise
            row = {"config": "+".join(opts), "status": "failed", "error": str(exc), "stage": stage}
        else:
            row = {**row_for(result, baseline or result), "stage": stage, "result": result}
            if baseline is not None:
                row["floor"] = floor.check(row, base_fidelity)
        measured[opts] = row
        rows.append(row)
        return row

    try:
        base_row = measure((), "baseline")
        baseline = base_row.pop("result")
        base_fidelity = base_row["fidelity"]
        base_row["floor"] = None

        def better(row: dict[str, Any], than: dict[str, Any]) -> bool:
            if row["status"] != "ok" or row["floor"] is not None:
                return False
            spread = max(row["latency_spread"], than["latency_spread"])
            return than["latency_median"] - row["latency_median"] > spread

        singles = [(name, measure((name,), "single")) for name in pool]
        survivors = sorted((r["latency_median"], n) for n, r in singles if better(r, base_row))
        best = ()
        best_row = base_row
        for _, name in survivors:
            trial = tuple(sorted({*best, name}))
            if trial == best or not _combinable(trial):
                continue
            row = measure(trial, "single" if len(trial) == 1 else "combination")
            if better(row, best_row):
                best, best_row = trial, row
        confirmation = confirm(studio, request, best, baseline, group_id, confirm_rounds, should_stop)
    except Exception as exc:
        studio.runlog.finish_group(group_id, "cancelled" if isinstance(exc, Cancelled) else "failed", str(exc))
        raise
    for row in rows:
        row.pop("result", None)
        row["meets_floor"] = row.get("status") == "ok" and row.get("floor") is None
    ok = [r for r in rows if r["meets_floor"]]
    studio.runlog.finish_group(group_id, "ok")
    return AutotuneResult(group_id, rows, best, confirmation,
                          pareto(ok, "psnr", better_high=True), pareto(rows, "peak_memory_mb", better_high=False))


def confirm(studio: Studio, request: GenerationRequest, winner: tuple[str, ...], baseline: RunResult,
            group_id: int, rounds: int, should_stop: StopFn | None = None) -> dict[str, Any]:
    """Baseline and winner interleaved (A B A B ...), one timed call each per round; medians and spreads."""
    if not winner or rounds < 1:
        return {"rounds": 0, "speedup": 1.0, "verdict": "baseline"}
    prepare = 1 if any(not REGISTRY[o].reversible for o in winner) else 0  # a rebuilt pipeline re-traces
    samples: dict[str, list[float]] = {"baseline": [], "winner": []}
    for _ in range(rounds):
        for key, opts in (("baseline", ()), ("winner", winner)):
            run = studio.generate(studio.derive(request, opts), warmup=prepare if opts else 0, repeats=1,
                                  group_id=group_id, baseline=None if not opts else baseline, should_stop=should_stop)
            samples[key].append(run.metrics["latency_median"])
    base, win = statistics.median(samples["baseline"]), statistics.median(samples["winner"])
    spread_b = max(samples["baseline"]) - min(samples["baseline"])
    spread_w = max(samples["winner"]) - min(samples["winner"])
    speedup = base / win
    ratios = sorted(b / w for b, w in zip(samples["baseline"], samples["winner"], strict=True))
    return {
        "rounds": rounds, "baseline_median": base, "winner_median": win, "speedup": speedup,
        "speedup_min": ratios[0], "speedup_max": ratios[-1],
        "verdict": verdict(speedup, spread_b, spread_w, base),
        "samples": samples,
    }


def summary(result: AutotuneResult) -> str:
    """The outcome in two sentences, with the spread and the noise verdict."""
    c = result.confirmation
    if not result.winner:
        return "No technique was faster than the baseline beyond noise while meeting the quality floor; keep the baseline."
    spread = f"x{c['speedup_min']:.2f}-x{c['speedup_max']:.2f} per round"
    noise = " This is within noise." if c["verdict"] == "within noise" else ""
    return (f"Fastest configuration that meets the floor: {result.winner_label}, x{c['speedup']:.2f} vs the baseline "
            f"({c['rounds']} interleaved rounds, {spread}; {c['verdict']}).{noise}")


def finite(value: Any) -> Any:
    """JSON-safe number: an identical image's PSNR is infinite."""
    return None if isinstance(value, float) and math.isinf(value) else value


def markdown(result: AutotuneResult) -> str:
    """Every measured configuration, with its stage, speedup, quality and whether it met the floor."""
    lines = [summary(result), "", "| configuration | stage | latency | speedup | verdict | PSNR | SSIM | fidelity | floor |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in result.rows:
        if r["status"] != "ok":
            lines.append(f"| {r['config']} | {r['stage']} | failed: {r['error']} | | | | | | |")
            continue
        psnr = "identical" if r["psnr"] == float("inf") else ("-" if r["psnr"] is None else f"{r['psnr']:.1f} dB")
        ssim = "-" if r["ssim"] is None else f"{r['ssim']:.3f}"
        fid = "-" if r["fidelity"] is None else f"{r['fidelity']:.0%}"
        lines.append(f"| {r['config']} | {r['stage']} | {r['latency_median']:.3f}s ± {r['latency_spread'] / 2:.3f} "
                     f"| x{r['speedup']:.2f} | {r['verdict']} | {psnr} | {ssim} | {fid} | {r['floor'] or 'met'} |")
    lines += ["", f"Pareto front, latency vs PSNR: {', '.join(result.pareto_quality)}",
              f"Pareto front, latency vs peak memory: {', '.join(result.pareto_memory)}"]
    return "\n".join(lines)


def as_json(result: AutotuneResult) -> dict[str, Any]:
    """The result as plain JSON (infinite PSNR of identical images becomes null)."""
    rows = [{k: finite(v) for k, v in r.items()} for r in result.rows]
    return {"group_id": result.group_id, "winner": list(result.winner), "winner_label": result.winner_label,
            "summary": summary(result), "confirmation": result.confirmation, "rows": rows,
            "pareto_quality": result.pareto_quality, "pareto_memory": result.pareto_memory}
