"""Compare: one prompt, seed and size; the baseline and N configurations, timed interleaved, side by side."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from studio import report
from studio.engine import Studio
from studio.engine.run_data import RunResult
from studio.measure.bench import StopFn
from studio.request import GenerationRequest, with_config
from studio.sweeps.runner import Entry, Progress, SweepResult, run_sweep

DEFAULT_ROUNDS = 5  # with 5 rounds one disturbed round cannot flip a verdict (see studio.measure.protocol)


@dataclass
class CompareResult:
    group_id: int
    records: list[dict[str, Any]]  # the shared vocabulary, one per configuration, baseline first
    results: list[RunResult | None]
    sweep: SweepResult


def parse_configs(configs: list[Any], request: GenerationRequest) -> list[GenerationRequest]:
    """Validate every configuration before anything runs ('openvino[mode=hybrid_int8]+cfg_cutoff' carries
    its own settings); the baseline comes first, once."""
    parsed = [dataclasses.replace(request, opts=(), settings={})]
    for config in configs:
        configured = with_config(request, config)
        if all(configured.config_label != p.config_label for p in parsed):
            parsed.append(configured)
    return parsed


def records_of(sweep: SweepResult) -> list[dict[str, Any]]:
    """Each configuration of a finished sweep in the shared vocabulary (failed ones with their error)."""
    base = sweep.baseline.result
    return [
        report.run_record(e.result, base)
        if e.result is not None
        else report.failed_record(e.label, e.error or "")
        for e in sweep.entries
    ]


def run_compare(
    studio: Studio,
    request: GenerationRequest,
    configs: list[Any],
    *,
    warmup: int = 1,
    rounds: int = DEFAULT_ROUNDS,
    progress: Progress | None = None,
    should_stop: StopFn | None = None,
) -> CompareResult:
    """The baseline and each configuration in interleaved rounds; one `compare` group in the run log."""
    entries = [Entry(r.config_label, r) for r in parse_configs(configs, request)]
    sweep = run_sweep(
        studio, "compare", entries, warmup=warmup, rounds=rounds, progress=progress, should_stop=should_stop
    )
    return CompareResult(sweep.group_id, records_of(sweep), [e.result for e in sweep.entries], sweep)
