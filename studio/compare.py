"""Side-by-side comparison of configurations: one prompt, seed and size; N configurations.

The baseline (no technique) always runs first; each row carries its latency median
and spread, speedup against the baseline, peak memory and saving, and how much its
image changed. A speedup smaller than the spread of either run is called noise.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from studio.bench import StopFn
from studio.errors import Cancelled, StudioError
from studio.service import RunResult, Studio
from studio.validate import GenerationRequest, check_opts, parse_opts

Progress = Callable[[int, int, str], None]


@dataclass
class CompareResult:
    group_id: int
    rows: list[dict[str, Any]]
    results: list[RunResult | None] = field(default_factory=list)


def parse_configs(configs: list[Any], request: GenerationRequest) -> list[tuple[str, ...]]:
    """Validate every configuration before anything runs; the baseline comes first, once."""
    parsed: list[tuple[str, ...]] = [()]
    for config in configs:
        opts = check_opts(parse_opts(config), request.spec, request.device)
        if opts not in parsed:
            parsed.append(opts)
    return parsed


def verdict(speedup: float, base_spread: float, spread: float, base_median: float) -> str:
    """'faster', 'slower' or 'within noise' for a configuration against the baseline."""
    noise = max(base_spread, spread)
    delta = base_median - base_median / speedup
    if abs(delta) <= noise:
        return "within noise"
    return "faster" if delta > 0 else "slower"


def pays_off_after(first_call: float | None, latency: float, base_latency: float) -> int | None:
    """After how many images a configuration's one-off first-call cost (compile, trace) is repaid by its
    per-image saving; None when there is no extra first-call cost or no saving to repay it with."""
    if first_call is None or first_call <= latency or latency >= base_latency:
        return None
    return math.ceil((first_call - latency) / (base_latency - latency))


def row_for(result: RunResult, baseline: RunResult) -> dict[str, Any]:
    """One line of the comparison table."""
    m, b = result.metrics, baseline.metrics
    speedup = b["latency_median"] / m["latency_median"]
    spread = m["latency_max"] - m["latency_min"]
    base_spread = b["latency_max"] - b["latency_min"]
    fidelity = (result.quality.get("fidelity") or {}).get("score")
    return {
        "config": result.label,
        "status": "ok",
        "latency_median": m["latency_median"],
        "latency_spread": spread,
        "speedup": speedup,
        "verdict": "baseline" if result is baseline else verdict(speedup, base_spread, spread, b["latency_median"]),
        "first_call_seconds": m.get("first_call_seconds"),
        "pays_off_after": pays_off_after(m.get("first_call_seconds"), m["latency_median"], b["latency_median"]),
        "recompiles": (m.get("stats") or {}).get("trace_count") or (m.get("stats") or {}).get("compile_count"),
        "peak_memory_mb": m["peak_memory"] / 2**20,
        "memory_added_mb": m["memory_added"] / 2**20,
        "memory_saving": 1 - m["memory_added"] / b["memory_added"] if b["memory_added"] else 0.0,
        "psnr": result.quality.get("psnr"),
        "ssim": result.quality.get("ssim"),
        "max_abs_diff": result.quality.get("max_abs_diff"),
        "fidelity": fidelity,
        "applied": ", ".join(result.applied) or "-",
        "image_path": result.image_path,
        "run_id": result.run_id,
    }


def run_compare(
    studio: Studio,
    request: GenerationRequest,
    configs: list[Any],
    *,
    warmup: int = 1,
    repeats: int = 3,
    kind: str = "compare",
    progress: Progress | None = None,
    should_stop: StopFn | None = None,
) -> CompareResult:
    """Run the baseline and each configuration; one group in the run log.

    A configuration that fails is kept as a `failed` row with its message; the others still run.
    """
    parsed = parse_configs(configs, request)
    group_id = studio.runlog.start_group(
        kind, model=request.model, prompt=request.prompt, seed=request.seed,
        settings={"configs": ["+".join(c) or "baseline" for c in parsed], "warmup": warmup, "repeats": repeats},
    )
    result = CompareResult(group_id, rows=[])
    baseline: RunResult | None = None
    try:
        for i, opts in enumerate(parsed):
            label = "+".join(opts) or "baseline"
            if progress:
                progress(i, len(parsed), label)
            try:
                run = studio.generate(studio.derive(request, opts, request.params), warmup=warmup,
                                      repeats=repeats, group_id=group_id, baseline=baseline,
                                      should_stop=should_stop)
            except Cancelled:
                raise
            except StudioError as exc:
                if baseline is None:
                    raise
                result.rows.append({"config": label, "status": "failed", "error": str(exc)})
                result.results.append(None)
                continue
            baseline = baseline or run
            result.rows.append(row_for(run, baseline))
            result.results.append(run)
    except Exception as exc:
        studio.runlog.finish_group(group_id, "failed", str(exc))
        raise
    studio.runlog.finish_group(group_id, "ok")
    return result


def markdown_table(rows: list[dict[str, Any]]) -> str:
    """The comparison as a Markdown table, in the seed documents' 'x1.00' format."""
    lines = ["| configuration | latency | speedup | verdict | peak memory | PSNR | SSIM |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        if r["status"] != "ok":
            lines.append(f"| {r['config']} | failed: {r['error']} | | | | | |")
            continue
        psnr = "-" if r["psnr"] is None else ("identical" if r["psnr"] == float("inf") else f"{r['psnr']:.1f} dB")
        ssim = "-" if r["ssim"] is None else f"{r['ssim']:.4f}"
        lines.append(
            f"| {r['config']} | {r['latency_median']:.3f}s ± {r['latency_spread'] / 2:.3f} | x{r['speedup']:.2f} "
            f"| {r['verdict']} | {r['peak_memory_mb']:.0f} MB | {psnr} | {ssim} |"
        )
    return "\n".join(lines)
