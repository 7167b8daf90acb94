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
from studio.sweeps.runner import Entry, Progress, SweepCancelled, SweepResult, run_sweep

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
    parsed = [dataclasses.replace(request, optimizations=(), settings={})]
    for config in configs:
        configured = with_config(request, config)
        if all(configured.config_label != p.config_label for p in parsed):
            parsed.append(configured)
    return parsed


def records_of(sweep: SweepResult) -> list[dict[str, Any]]:
    """Each configuration of a sweep in the shared vocabulary: failed ones with their error and, in a
    cancelled sweep, the others with the rounds they had (`partial_record`) or as cancelled."""
    base = sweep.baseline.result or sweep.baseline.partial
    records = []
    for e in sweep.entries:
        if e.result is not None:
            records.append(report.run_record(e.result, base))
        elif e.partial is not None:
            records.append(partial_record(e.partial, base, sweep.rounds))
        elif e.error is not None:
            records.append(report.failed_record(e.label, e.error))
        else:
            records.append(
                report.failed_record(e.label, "the sweep stopped before its first round", "cancelled")
            )
    return records


def partial_record(partial: RunResult, base: RunResult | None, rounds: int) -> dict[str, Any]:
    """A configuration of a cancelled sweep that ran some of its rounds: its figures over those rounds (the
    speedup over the rounds its reference ran too, no verdict), status cancelled, `partial` true and the
    rounds asked for in `rounds_asked`."""
    record = report.run_record(partial, base)
    done = record["rounds"] or 0
    record.update(status="cancelled", error=f"cancelled after {done} of {rounds} rounds")
    return {**record, "partial": True, "rounds_asked": rounds}


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
    """The baseline and each configuration in interleaved rounds; one `compare` group in the run log.

    Raises:
        SweepCancelled: `should_stop` said stop; its `records` are what was measured until then.
    """
    entries = [Entry(r.config_label, r) for r in parse_configs(configs, request)]
    try:
        sweep = run_sweep(
            studio,
            "compare",
            entries,
            warmup=warmup,
            rounds=rounds,
            progress=progress,
            should_stop=should_stop,
        )
    except SweepCancelled as exc:
        exc.records = records_of(exc.partial)
        raise
    return CompareResult(sweep.group_id, records_of(sweep), [e.result for e in sweep.entries], sweep)
