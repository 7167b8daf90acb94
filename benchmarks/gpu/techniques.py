"""The techniques section: every technique of the registry that can run on the device, and the model plan's
combinations, against the baseline (the model's own fp16 or bf16 on a GPU), through the engine's Compare:
latency, speedup with its range over interleaved rounds, PSNR against the baseline's image; then, on a
pipeline of its own, whether reverting each one gives back exactly the baseline's image.

Configurations are compared in groups (`Plan.group`, and no more than the device's memory holds: a sweep keeps
one copy of the model per configuration that changes the pipeline); each group times its own baseline, and
each speedup is against the baseline of its own rounds.
"""

from __future__ import annotations

import logging
from typing import Any

from benchmarks.gpu.common import base_request, baseline_label, cpu_only, release
from benchmarks.gpu.plan import COMBINATIONS, ModelPlan, Plan
from benchmarks.gpu.results import Results, not_run
from benchmarks.gpu.revert import check_reverts
from studio import devices
from studio.engine import Studio
from studio.errors import StudioError
from studio.optimizations import REGISTRY, conflicts_of, unavailable_reason
from studio.request import MAX_CONFIGS, GenerationRequest, parse_config, with_config
from studio.sweeps.compare import records_of
from studio.sweeps.runner import Entry, memory_for_copies, run_sweep

log = logging.getLogger(__name__)
GROUP_SHARE = 0.75  # of a sweep's bound that one group's copies take: room for activations and compiles
ARCH_DEVICE_MAP = (
    "device_map_balanced is not measured on a random-weight architecture: pipelines.loader builds those in "
    "the process and refuses a device map for them."
)


def reason(plan: Plan, request: GenerationRequest, name: str) -> str | None:
    """Why technique `name` is not measured here, or None."""
    if name in plan.skip:
        return plan.skip[name]
    hw = devices.detect()
    why = cpu_only(name) or unavailable_reason(REGISTRY[name], hw, plan.device, request.spec.family)
    if why is None and name == "device_map_balanced" and request.spec.source.startswith("arch:"):
        return ARCH_DEVICE_MAP
    return why


def configure(request: GenerationRequest, names: list[str]) -> GenerationRequest:
    """The baseline with `names` added ('torch_compile[mode=reduce-overhead]' with its settings; a baseline
    technique they conflict with makes way: bf16 for fp16)."""
    clash = set().union(*(conflicts_of(n) for n in parse_config("+".join(names))[0]))
    kept = [o for o in request.optimizations if o not in clash]
    return with_config(request, "+".join(dict.fromkeys([*kept, *names])))


def _refusal(request: GenerationRequest, entry: str) -> str | None:
    """Why the request refuses technique `entry` on its own (its settings on this device), or None."""
    try:
        configure(request, [entry])
    except StudioError as exc:
        return str(exc)
    return None


def candidates(plan: Plan, model: ModelPlan, request: GenerationRequest) -> tuple[list, list[dict]]:
    """(technique, configured request) pairs to measure, and the records of the techniques that are not."""
    todo, rows = [], []
    chosen = [t for t in plan.techniques if t not in COMBINATIONS] if plan.techniques else list(REGISTRY)
    for entry in chosen:  # a name, or a name with settings ('torch_compile[regional=true]')
        name = parse_config(entry)[0][0]
        if entry in request.optimizations:
            continue  # the baseline's own precision
        why = reason(plan, request, name)
        if why:
            rows.append(not_run(entry, why, "unavailable", technique=entry))
            continue
        try:
            todo.append((entry, configure(request, [entry])))
        except StudioError as exc:
            rows.append(not_run(entry, str(exc), "unavailable", technique=entry))
    for label, combination in model.combinations:
        if plan.techniques and label not in plan.techniques:
            continue
        members = [n for n in combination if not reason(plan, request, parse_config(n)[0][0])]
        refused = [n for n in members if _refusal(request, n)]  # an attention backend this device lacks
        kept = [n for n in members if n not in refused]
        dropped = [n for n in combination if n not in kept]
        if dropped:
            log.info("%s without %s (not measured here)", label, ", ".join(dropped))
        if not kept:
            continue
        try:
            configured = configure(request, kept)
        except StudioError as exc:  # members that run alone but not together
            rows.append(not_run("+".join(kept), str(exc), "unavailable", technique=label))
            continue
        combined = dict(model.combinations)
        same = next((n for n, r in todo if n in combined and r.config_label == configured.config_label), None)
        if same is not None:  # what is left of it here is a combination already measured
            rows.append(
                not_run(configured.config_label, f"the same configuration as {same} here", technique=label)
            )
            continue
        todo.append((label, configured))
    return todo, rows


def group_size(plan: Plan, studio: Studio, request: GenerationRequest) -> int:
    """How many configurations one Compare may hold: the plan's limit, Compare's, and the device's memory."""
    per_copy = studio.manager.model_bytes(request)
    available, _ = memory_for_copies(plan.device)  # what a sweep's copies may take, the allocator's cache too
    return max(1, min(plan.group, MAX_CONFIGS - 1, int(GROUP_SHARE * available / per_copy) - 1))


def _compare(studio: Studio, plan: Plan, request: GenerationRequest, todo: list) -> list[dict[str, Any]]:
    """One Compare of the plan's baseline (fp16 on a GPU; a user's Compare starts from no technique) and
    `todo`; the baseline's record first, then one per technique."""
    entries = [Entry(baseline_label(request), request), *(Entry(r.config_label, r) for _, r in todo)]
    records = records_of(run_sweep(studio, "compare", entries, warmup=plan.warmup, rounds=plan.rounds))
    by_label = {r["config"]: r for r in records}
    # each group times its own baseline: a row's speedup is against its own group's, which the table shows
    own = {"baseline_s": records[0]["latency_s"]}
    rows = [{**records[0], "technique": "baseline", **own}]
    for name, configured in todo:
        record = by_label.get(configured.config_label)
        missing = not_run(configured.config_label, "the sweep returned no record", "failed", technique=name)
        rows.append({**record, "technique": name, **own} if record else missing)
    return rows


def measure_group(studio: Studio, plan: Plan, request: GenerationRequest, todo: list) -> list[dict[str, Any]]:
    """A group's Compare; if the group fails as a whole, each configuration again on its own, so that one
    technique failing on this device costs only its own row (the error is recorded, not hidden)."""
    try:
        return _compare(studio, plan, request, todo)
    except Exception as exc:  # a one-shot run on a GPU machine: record the failure and go on
        if len(todo) == 1:
            log.exception("%s failed", todo[0][0])
            why = f"{type(exc).__name__}: {exc}"
            return [not_run(todo[0][1].config_label, why, "failed", technique=todo[0][0])]
        log.exception("a group of %d configurations failed; measuring each on its own", len(todo))
    rows: list[dict[str, Any]] = []
    for item in todo:
        single = measure_group(studio, plan, request, [item])
        rows += single[1:] if len(single) > 1 else single
    return rows


def measure(plan: Plan, model: ModelPlan, studio: Studio, results: Results) -> list[dict[str, Any]]:
    """The techniques of one model plan, written to the results after every group."""
    request = base_request(plan, model)
    todo, unavailable = candidates(plan, model, request)
    section = {
        "model": model.model,
        "side": model.side,
        "steps": model.steps,
        "baseline": baseline_label(request),
    }
    size = group_size(plan, studio, request)
    rows: list[dict[str, Any]] = []
    for start in range(0, len(todo), size):
        group = todo[start : start + size]
        if plan.left() < 0:
            rows += [not_run(r.config_label, "not run: out of time", technique=n) for n, r in group]
            continue
        measured = measure_group(studio, plan, request, group)
        rows += [r for r in measured if r["technique"] != "baseline" or not rows]
        results.put("techniques", model.role, {**section, "rows": rows + unavailable})
    release(plan)
    check_reverts(
        plan,
        model,
        request,
        rows,
        lambda: results.put("techniques", model.role, {**section, "rows": rows + unavailable}),
    )
    return rows
