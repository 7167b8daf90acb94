"""The speed ladder of the documentation on a GPU: fp32 (classic attention) -> cuDNN auto-tuner -> TF32 ->
fp16 -> channels last -> traced UNet -> SDPA -> torch.compile (max-autotune unless the plan names another
mode) -> CUDA graphs (reduce-overhead), cumulative.

The rungs are `studio.sweeps.ladder.Rung`s with settings; a rung that cannot run here is skipped with the
reason (`studio.sweeps.ladder.choose`). Sweeps through the engine's sweep helper, each with the fp32 rung
first and every speedup against it in the same rounds: the eager rungs together, then each compiled rung on
its own, so that a compile that runs past a time limit takes neither the eager figures nor
another compiled rung's with it. `--rungs compiled` climbs the compiled rungs only (fp32 beside each).
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from benchmarks.gpu.common import base_request
from benchmarks.gpu.plan import ModelPlan, Plan
from benchmarks.gpu.results import Results
from studio.engine import Studio
from studio.request import GenerationRequest, with_config
from studio.sweeps.compare import records_of
from studio.sweeps.ladder import Rung, Step, choose, ladder_records
from studio.sweeps.runner import Entry, run_sweep

log = logging.getLogger(__name__)
EAGER_RUNGS: tuple[tuple[Rung, dict[str, dict[str, str]]], ...] = (
    (Rung("fp32", add=("classic_attention",)), {}),
    (Rung("cuDNN auto-tuner", add=("cudnn_benchmark",)), {}),
    (Rung("TF32", add=("tf32",)), {}),
    (Rung("fp16", add=("fp16",), fallback=("bf16",)), {}),
    (Rung("channels last", add=("channels_last",)), {}),
    (Rung("traced UNet", add=("jit_trace_unet",)), {}),
    (Rung("SDPA", add=("sdpa",), remove=("classic_attention",)), {}),
)


def rungs(compile_mode: str = "max-autotune") -> tuple[tuple[Rung, dict[str, dict[str, str]]], ...]:
    """The ladder's rungs with their settings; the compiled rung in `compile_mode` (the plan's), then CUDA
    graphs."""
    compiled = Rung(f"torch.compile {compile_mode}", add=("torch_compile",), remove=("jit_trace_unet",))
    graphs = Rung("CUDA graphs (reduce-overhead)", add=("torch_compile",), remove=("jit_trace_unet",))
    return (
        *EAGER_RUNGS,
        (compiled, {"torch_compile": {"mode": compile_mode}}),
        (graphs, {"torch_compile": {"mode": "reduce-overhead"}}),
    )


def _label(optimizations: list[str], settings: dict[str, dict[str, str]]) -> str:
    """'fp16+torch_compile[mode=max-autotune]': a configuration as Compare and `with_config` take it."""
    given = {
        name: ",".join(f"{k}={v}" for k, v in s.items())
        for name, s in settings.items()
        if name in optimizations
    }
    return "+".join(f"{o}[{given[o]}]" if o in given else o for o in optimizations)


def plan_rungs(plan: Plan, request: GenerationRequest) -> list[tuple[Step, GenerationRequest | None]]:
    """Every rung with the request it runs (None when skipped), planned as if each one succeeds."""
    fp32 = dataclasses.replace(request, optimizations=(), settings={})
    steps, current, settings = [], [], {}
    for rung, rung_settings in rungs(plan.compile_mode):
        names, why = choose(rung, fp32)
        why = why or next((plan.skip[n] for n in names if n in plan.skip), None)
        if why:
            steps.append((Step(rung, tuple(current), why, skipped=True), None))
            continue
        current = list(dict.fromkeys([*(o for o in current if o not in rung.remove), *names]))
        settings = {**settings, **rung_settings}
        configured = with_config(fp32, _label(current, settings))
        note = "" if names == rung.add else f"{'+'.join(rung.add)} cannot run here; used {'+'.join(names)}"
        steps.append((Step(rung, configured.optimizations, note), configured))
    return steps


def _sweep(studio: Studio, plan: Plan, planned: list[tuple[Step, GenerationRequest]]) -> dict[str, dict]:
    """One interleaved sweep of `planned` (the fp32 rung first); each rung's record by the rung's label."""
    entries = [Entry(step.rung.label, request) for step, request in planned]
    sweep = run_sweep(studio, "ladder", entries, warmup=plan.warmup, rounds=plan.rounds, max_configs=None)
    return {e.label: record for e, record in zip(entries, records_of(sweep), strict=True)}


def _measure(studio: Studio, plan: Plan, planned: list, why: dict[str, str]) -> dict[str, dict]:
    """`planned` (the fp32 rung first) in one sweep; if that fails, each rung in a sweep with the fp32 rung
    alone, so that one rung failing on this device costs only its own row (its error goes into `why`)."""
    try:
        return _sweep(studio, plan, planned)
    except Exception as exc:  # a one-shot run on a GPU machine: record the failure and go on
        log.exception("a ladder sweep of %d rungs failed", len(planned))
        if len(planned) <= 2:
            why[planned[-1][0].rung.label] = f"failed: {type(exc).__name__}: {exc}"
            return {}
    measured: dict[str, dict] = {}
    for rung in planned[1:]:
        measured.update(_measure(studio, plan, [planned[0], rung], why))
    return measured


def _rows(planned: list, measured: dict[str, dict], why: dict[str, str]) -> list[dict[str, Any]]:
    """One record per rung in order: measured, skipped with its reason, or not measured (`why` says why)."""
    steps, records = [], []
    for step, request in planned:
        label = step.rung.label
        if label in measured:
            steps.append(step)
            records.append(measured[label])
        elif request is None:
            steps.append(step)
        else:
            steps.append(dataclasses.replace(step, note=why.get(label, "not measured"), skipped=True))
    return ladder_records(steps, records)


def measure(plan: Plan, model: ModelPlan, studio: Studio, results: Results) -> list[dict[str, Any]]:
    """The ladder on one model plan; the records, one per rung, also in the results. The eager rungs in one
    sweep (unless the plan climbs the compiled rungs only), then each compiled rung in a sweep of its own with
    the fp32 rung, so that a compile a time limit cuts off costs only its own row."""
    planned = plan_rungs(plan, base_request(plan, model))
    section = {"model": model.model, "side": model.side, "steps": model.steps}
    runnable = [p for p in planned if p[1] is not None]
    eager = [p for p in runnable if "torch_compile" not in p[1].optimizations]
    compiled = [p for p in runnable if "torch_compile" in p[1].optimizations]
    why = {step.rung.label: "not measured: the run ended before this rung" for step, _ in compiled}
    fp32 = eager[0][0].rung.label
    if plan.rungs == "compiled":
        skipped = "not run: the compiled rungs only (--rungs compiled)"
        why.update({step.rung.label: skipped for step, _ in eager[1:]})
        measured: dict[str, dict] = {}
    else:
        measured = _measure(studio, plan, eager, why)
    results.put("ladder", model.role, {**section, "rows": _rows(planned, measured, why)})
    for step, request in compiled:
        if plan.left() <= 0:
            why[step.rung.label] = "not run: out of time"
            continue
        more = _measure(studio, plan, [eager[0], (step, request)], why)
        baseline = more.pop(fp32, None)
        if baseline and fp32 not in measured:
            measured[fp32] = baseline
        measured.update(more)
        results.put("ladder", model.role, {**section, "rows": _rows(planned, measured, why)})
    rows = _rows(planned, measured, why)
    results.put("ladder", model.role, {**section, "rows": rows})
    return rows
