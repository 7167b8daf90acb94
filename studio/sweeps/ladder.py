"""The diffusers documentation's speed ladder, on this machine: cumulative techniques, timed interleaved.

original (fp32, classic attention) -> cuDNN autotuner -> autocast -> fp16 (bf16 where fp16 does not apply,
the rung then named "bf16 in place of fp16") -> channels last -> traced UNet -> memory-efficient attention,
and on CPUs the OpenVINO runtime. A step that cannot run here is shown as skipped with the reason, not
dropped; so is a step in bf16 on a CPU that has no bf16 instructions (`emulated_here`). The plan is made
once (`plan`), before anything runs, and used by the single-process and the distributed ladder alike: a rung
that fails does not change the later ones. Each rung is declared by the technique it adds
(`Optimization.ladder_rung`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from studio import devices, report
from studio.engine import Studio
from studio.measure.bench import StopFn
from studio.optimizations import REGISTRY, conflicts_of, unavailable_reason
from studio.optimizations.precision import computes_bf16
from studio.request import GenerationRequest, check_opts
from studio.sweeps.compare import DEFAULT_ROUNDS, records_of
from studio.sweeps.runner import Entry, Progress, SweepCancelled, run_sweep


@dataclass(frozen=True)
class Rung:
    label: str
    add: tuple[str, ...] = ()
    remove: tuple[str, ...] = ()
    fallback: tuple[str, ...] = ()


def rung_of(name: str) -> Rung:
    """The rung technique `name` declares (`Optimization.ladder_rung`) as the ladder runs it."""
    declared = REGISTRY[name].ladder_rung
    remove = tuple(sorted(conflicts_of(name))) if declared.replaces_conflicts else declared.remove
    return Rung(declared.label, add=(name,), remove=remove, fallback=declared.fallback)


# The rungs in order: each technique declares the one that adds it.
RUNGS = tuple(
    rung_of(opt.name)
    for opt in sorted(
        (o for o in REGISTRY.values() if o.ladder_rung is not None), key=lambda o: o.ladder_rung.position
    )
)


@dataclass(frozen=True)
class Step:
    """A planned rung: the configuration it runs, a note, or why it is skipped."""

    rung: Rung
    optimizations: tuple[str, ...]
    note: str = ""
    skipped: bool = False
    ran: tuple[str, ...] = ()  # what it adds here: the rung's own techniques, or its fallback

    @property
    def label(self) -> str:
        """The rung as it runs here: its own name, or what runs in its place ('bf16 in place of fp16')."""
        if not self.ran or self.ran == self.rung.add:
            return self.rung.label
        return f"{'+'.join(self.ran)} in place of {self.rung.label}"


def emulated_here(name: str, hw: devices.Hardware, device: str) -> str | None:
    """Why the ladder leaves out technique `name` on this CPU although it runs: bf16 math where the CPU has no
    bf16 instructions (AVX512-BF16 or AMX). PyTorch emulates it there, many times slower than fp32 (one step
    of sd15-arch on an AVX2-only AMD EPYC: 80.8 s against 5.0 s), and every later rung would carry it."""
    device_type = device.split(":")[0]
    if device_type != "cpu" or hw.cpu_bf16 or not computes_bf16(REGISTRY[name], device_type):
        return None
    what = name if name == "bf16" else f"{name} (bf16 on a CPU)"
    return (
        f"{what}: this CPU has no bf16 instructions (AVX512-BF16 or AMX); emulated, bf16 is many times "
        "slower than fp32, so the later rungs go without it."
    )


def choose(rung: Rung, request: GenerationRequest) -> tuple[tuple[str, ...], str | None]:
    """The techniques this rung adds here (its fallback if needed), or the reason it cannot run, or is left
    out (`emulated_here`)."""
    hw = devices.detect()
    reasons = []
    for names in (rung.add, rung.fallback):
        if not names:
            continue
        why = [
            unavailable_reason(REGISTRY[n], hw, request.device, request.spec.family)
            or emulated_here(n, hw, request.device)
            for n in names
        ]
        if not any(why):
            return names, None
        reasons += [w for w in why if w]
    return (), " ".join(reasons)


def plan(request: GenerationRequest) -> list[Step]:
    """Every rung, planned as if each one succeeds."""
    steps, current = [], ()
    for rung in RUNGS:
        names, reason = choose(rung, request)
        if reason:
            steps.append(Step(rung, current, reason, skipped=True))
            continue
        current = check_opts(
            [o for o in current if o not in rung.remove] + list(names), request.spec, request.device
        )
        note = "" if names == rung.add else f"{'+'.join(rung.add)} cannot run here; used {'+'.join(names)}"
        steps.append(Step(rung, current, note, ran=names))
    return steps


def ladder_records(steps: list[Step], records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One record per rung, in order: measured rungs from `records` (in run order), skipped ones with the
    reason."""
    measured = iter(records)
    rows = []
    for step in steps:
        if step.skipped:
            rows.append(
                {
                    **report.failed_record("+".join(step.optimizations) or "baseline", step.note, "skipped"),
                    "step": step.rung.label,
                    "note": step.note,
                }
            )
        else:
            rows.append({**next(measured), "step": step.label, "note": step.note})
    return rows


def run_ladder(
    studio: Studio,
    request: GenerationRequest,
    *,
    warmup: int = 1,
    rounds: int = DEFAULT_ROUNDS,
    progress: Progress | None = None,
    should_stop: StopFn | None = None,
) -> tuple[int, list[dict[str, Any]]]:
    """Every runnable rung in interleaved rounds, speedups against the first; the group id and one record per
    rung (a cancelled ladder raises `SweepCancelled` with the records so far)."""
    steps = plan(request)
    entries = [
        Entry(s.label, dataclasses.replace(request, optimizations=s.optimizations))
        for s in steps
        if not s.skipped
    ]
    try:
        sweep = run_sweep(
            studio,
            "ladder",
            entries,
            warmup=warmup,
            rounds=rounds,
            progress=progress,
            should_stop=should_stop,
        )
    except SweepCancelled as exc:
        exc.records = ladder_records(steps, records_of(exc.partial))
        raise
    return sweep.group_id, ladder_records(steps, records_of(sweep))


STEP_COLUMN = (("Step", lambda r: r["step"]),)


def markdown(rows: list[dict[str, Any]]) -> str:
    """The ladder as the documentation's table: step, configuration, latency, speedup with its range."""
    return report.markdown(rows, STEP_COLUMN)
