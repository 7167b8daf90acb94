"""`run_cards`: the suite measured on this machine, each model through Compare's interleaved rounds.

For each model of the suite:

1. Compare: the baseline (and on a GPU the reference precision), the configurations expected to keep the math
   and, on a GPU, the fixed lossy list; or the baseline and `--configs`. Warm-up calls apart, then
   interleaved rounds; each configuration is classified by its measured image (`studio.cards.picks`);
2. on a CPU, the auto-tuner looks for a faster configuration that changes the image, within what the budget
   leaves after the first Compare's first calls (`studio.cards.search`);
3. when it found one, a last Compare measures the baseline, the best keeping the math and the auto-tuner's
   winner in the same rounds: the card's rows.

Nothing is written here: `studio.cards.card.save` writes the card once everything is measured, so a
cancelled or failed run leaves no card behind.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from PIL import Image

from studio import devices
from studio.cards import picks, wording
from studio.cards.card import model_entry, new_card
from studio.cards.machine import snapshot
from studio.cards.options import Options
from studio.cards.search import lossy_search
from studio.cards.suite import Case, pick_cases, suite_for
from studio.errors import Cancelled, StudioError
from studio.measure import bench, quality
from studio.measure.bench import StopFn
from studio.request import GenerationRequest, build_request, with_config
from studio.sweeps.compare import CompareResult, run_compare

Progress = Callable[[float, str], None]  # (fraction done 0-1, what runs now): gr.Progress fits


@dataclass
class ModelRun:
    """One model's part of a card run: its card entry and the images of its baseline and winners."""

    case: Case
    entry: dict[str, Any]
    images: list[tuple[list[str], Image.Image]]  # (caption lines, image): the baseline, then the winners


@dataclass
class CardRun:
    """A finished run of the suite: the card (`studio.cards.card`) and each model's images."""

    card: dict[str, Any]
    runs: list[ModelRun]


def _part(progress: Progress | None, lo: float, hi: float, prefix: str) -> Progress:
    def report(fraction: float, message: str) -> None:
        if progress:
            progress(lo + (hi - lo) * max(0.0, min(1.0, fraction)), f"{prefix}: {message}")

    return report


def _sweep_progress(progress: Progress) -> Callable[[int, int, str], None]:
    return lambda done, total, label: progress(done / max(total, 1), label)


def candidates_of(result: CompareResult, case: Case) -> list[dict[str, Any]]:
    """Every configuration of a Compare that ran, as a pick of its kind (keeps the math / changes the
    image) with its PSNR against the reference image (the baseline's, or on a GPU the reference row's)."""
    by_label = {r.label: r for r in result.results if r is not None}
    reference = by_label.get(case.reference) if case.reference else result.results[0]
    found = []
    for record, run in zip(result.records, result.results, strict=True):
        if run is None:
            continue
        psnr = quality.psnr(run.arrays[0], reference.arrays[0]) if reference is not None else float("nan")
        kind = picks.kind_of(record, psnr, run.request.dtype_name, case.reference, case.keep_db)
        if kind is not None:
            found.append(picks.pick(kind, record, case.reference, psnr))
    return found


def usable(configs: tuple[str, ...], request: GenerationRequest) -> tuple[list[str], list[str]]:
    """The configurations of the suite that can run here, and a sentence for each that cannot."""
    ok, skipped = [], []
    for config in configs:
        try:
            with_config(request, config)
        except StudioError as exc:
            skipped.append(f"{config} not measured: {exc}")
        else:
            ok.append(config)
    return ok, skipped


def effective(request: GenerationRequest, config: str) -> tuple:
    """What `config` runs on `request`: its techniques with every setting, defaults filled in ('openvino' and
    'openvino[mode=fp32]' are the same configuration)."""
    from studio.optimizations import REGISTRY

    configured = with_config(request, config)
    return tuple(
        (name, tuple(sorted({**REGISTRY[name].defaults, **configured.settings.get(name, {})}.items())))
        for name in configured.optimizations
    )


def distinct(request: GenerationRequest, configs: list[str]) -> list[str]:
    """`configs` without those that run the same configuration as an earlier one."""
    seen: set[tuple] = set()
    kept = []
    for config in configs:
        key = effective(request, config)
        if key not in seen:
            seen.add(key)
            kept.append(config)
    return kept


def _images(result: CompareResult, chosen: list[dict[str, Any]]) -> list[tuple[list[str], Image.Image]]:
    """The baseline's image and each winner's, with caption lines: what it is, its configuration, figures."""
    by_label = {r.label: r for r in result.results if r is not None}
    base = result.records[0]
    shown = [
        (
            ["baseline (PyTorch fp32)", f"{wording.seconds(base['seconds_per_image'])} s per image"],
            base["config"],
        )
    ]
    for p in chosen:
        figures = ", ".join(
            f
            for f in (wording.ratio(p), f"{p['psnr_db']:.1f} dB" if p.get("psnr_db") is not None else "")
            if f
        )
        shown.append(
            (
                [
                    picks.WORDS[p["kind"]],
                    p["config"],
                    f"{wording.seconds(p['seconds_per_image'])} s, {figures}",
                ],
                p["config"],
            )
        )
    return [(lines, by_label[label].images[0]) for lines, label in shown if label in by_label]


def measure_case(
    studio: Any,
    case: Case,
    request: GenerationRequest,
    options: Options,
    progress: Progress,
    should_stop: StopFn | None = None,
) -> ModelRun:
    """One model of the suite: Compare, the lossy search, the final Compare (see the module's steps)."""
    started = time.monotonic()
    notes: list[str] = []
    if options.configs:
        configs = list(options.configs)
    else:
        configs, notes = usable(case.keep + case.lossy_configs, request)
    lead = [case.reference] if case.reference and case.reference not in configs else []
    searching = not options.configs and bool(case.lossy_search)
    first = run_compare(
        studio,
        request,
        lead + configs,
        warmup=options.warmup,
        rounds=options.rounds,
        progress=_sweep_progress(_part(progress, 0.0, 0.4 if searching else 1.0, "compare")),
        should_stop=should_stop,
    )
    final, search = first, {"kind": "configs" if options.configs else "fixed", "group_id": first.group_id}
    if searching:
        give_back_memory(request.device)
        final, search = _search_and_confirm(
            studio, case, request, options, first=first, progress=progress, should_stop=should_stop
        )
    candidates = candidates_of(final, case)
    if case.reference and case.reference not in {r.label for r in final.results if r is not None}:
        notes.append(
            f"The reference row ({case.reference}) failed: no configuration is held to keep its math."
        )
    entry = model_entry(
        case,
        request,
        records=final.records,
        candidates=candidates,
        search=search,
        notes=notes,
        command=options.command(),
    )
    chosen = entry["winners"]
    entry["seconds"] = round(time.monotonic() - started, 1)
    return ModelRun(case, entry, _images(final, chosen))


def _search_and_confirm(
    studio: Any,
    case: Case,
    request: GenerationRequest,
    options: Options,
    first: CompareResult,
    progress: Progress,
    should_stop: StopFn | None,
) -> tuple[CompareResult, dict[str, Any]]:
    """Steps 2 and 3: the auto-tuner within the budget, then what it found (`search.to_confirm`) and the best
    keeping the math in the same rounds (the first Compare stands when the auto-tuner found nothing)."""
    call_s = first.records[0]["latency_s"] or 1.0
    found, search = lossy_search(
        studio,
        request,
        case.lossy_search,
        budget_s=options.budget_s,
        spent_s=sum(r.get("first_call_s") or 0.0 for r in first.records[1:]),  # counted against the budget
        call_s=call_s,
        warmup=options.warmup,
        rounds=options.rounds,
        keep_db=case.keep_db,
        progress=_part(progress, 0.4, 0.8, "search"),
        should_stop=should_stop,
    )
    search["screen"] = first.records
    search["screen_group_id"] = first.group_id
    if not found:
        return first, search
    keep = picks.best(candidates_of(first, case), picks.KEEPS)
    lead = [case.reference] if case.reference else []
    configs = distinct(request, lead + ([keep["config"]] if keep else []) + found)
    give_back_memory(request.device)
    try:
        final = run_compare(
            studio,
            request,
            configs,
            warmup=options.warmup,
            rounds=options.rounds,
            progress=_sweep_progress(_part(progress, 0.8, 1.0, "confirm")),
            should_stop=should_stop,
        )
    except Cancelled:
        raise
    except StudioError as exc:  # refused (memory) or failed: the first Compare stands, the search is said
        search["unconfirmed"] = found
        search["summary"] = (
            f"{search['summary']} Measuring {', '.join(found)} again failed ({exc}); the rows are the first "
            "Compare's."
        )
        return first, search
    search["group_id"] = final.group_id
    return final, search


def give_back_memory(device: str) -> None:
    """Between a model's Compares: collect garbage and, with glibc, return freed heap to the system, so the
    next sweep's memory check sees what the last one no longer holds."""
    import ctypes
    import ctypes.util

    bench.release_memory(device)
    libc = ctypes.util.find_library("c")
    trim = getattr(ctypes.CDLL(libc), "malloc_trim", None) if libc else None
    if trim is not None:
        trim(0)


def run_cards(
    options: Options | None = None,
    *,
    studio: Any = None,
    cases: list[Case] | None = None,
    progress: Progress | None = None,
    should_stop: StopFn | None = None,
) -> CardRun:
    """Measure the suite (or `cases`) on this machine; the card is returned, not written (see `card.save`).

    Args:
        options: what to measure (`studio.cards.options.validate_options`); default: the whole suite.
        studio: the engine (`studio.engine.Studio`); default: a new one on the studio's home.
        cases: the cases to measure instead of the suite's (tests shorten them).
        progress: told (fraction done, what runs now) as the run goes.
        should_stop: asked between steps; truthy cancels (`Cancelled`), and nothing is written.

    Every model's request and every configuration given in `options.configs` is checked before anything
    runs.
    """
    from studio.engine import Studio

    options = options or Options()
    device = devices.resolve(options.device)
    chosen = cases or pick_cases(suite_for(devices.detect(), device), list(options.models or ()) or None)
    requests = {c.model: build_request(**c.fields_on(device)) for c in chosen}
    for config in options.configs or ():
        for request in requests.values():
            with_config(request, config)
    studio = studio or Studio()
    started, runs = time.monotonic(), []
    for i, case in enumerate(chosen):
        part = _part(progress, i / len(chosen), (i + 1) / len(chosen), case.model)
        runs.append(
            measure_case(studio, case, requests[case.model], options, progress=part, should_stop=should_stop)
        )
        give_back_memory(device)
    card = new_card(snapshot(), options, device, [r.entry for r in runs], time.monotonic() - started)
    if progress:
        progress(1.0, "done")
    return CardRun(card, runs)
