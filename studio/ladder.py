"""The seed documents' ladder, on this machine: cumulative techniques, each row timed.

original (fp32, classic attention) -> cuDNN autotuner -> autocast -> fp16 (bf16 where
fp16 does not apply) -> channels last -> traced UNet -> memory-efficient attention.
A step that cannot run here is shown as skipped with the reason, not dropped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from studio import devices
from studio.bench import StopFn
from studio.compare import Progress
from studio.errors import Cancelled, StudioError
from studio.optimizations import REGISTRY, unavailable_reason
from studio.service import RunResult, Studio
from studio.validate import GenerationRequest, check_opts


@dataclass(frozen=True)
class Rung:
    label: str
    add: tuple[str, ...] = ()
    remove: tuple[str, ...] = ()
    fallback: tuple[str, ...] = ()


RUNGS = (
    Rung("original", add=("classic_attention",)),
    Rung("cuDNN auto-tuner", add=("cudnn_benchmark",)),
    Rung("autocast", add=("autocast",)),
    Rung("fp16", add=("fp16",), fallback=("bf16",)),
    Rung("channels last", add=("channels_last",)),
    Rung("traced UNet", add=("jit_trace_unet",)),
    Rung("memory-efficient attention", add=("xformers",), remove=("classic_attention",), fallback=("sdpa",)),
)


def choose(rung: Rung, request: GenerationRequest) -> tuple[tuple[str, ...], str | None]:
    """The techniques this rung adds here (its fallback if needed), or the reason it cannot run."""
    hw = devices.detect()
    reasons = []
    for names in (rung.add, rung.fallback):
        if not names:
            continue
        why = [unavailable_reason(REGISTRY[n], hw, request.device, request.spec.family) for n in names]
        if not any(why):
            return names, None
        reasons += [w for w in why if w]
    return (), " ".join(reasons)


def row(rung: Rung, status: str, opts: tuple[str, ...], result: RunResult | None = None,
         base: RunResult | None = None, note: str = "") -> dict[str, Any]:
    row: dict[str, Any] = {"step": rung.label, "status": status, "config": "+".join(opts), "note": note,
                           "latency": None, "speedup": None, "run_id": None}
    if result is not None:
        latency = result.metrics["latency_median"]
        base_latency = (base or result).metrics["latency_median"]
        row.update(latency=latency, speedup=base_latency / latency, run_id=result.run_id,
                   spread=result.metrics["latency_max"] - result.metrics["latency_min"],
                   psnr=result.quality.get("psnr"), image_path=result.image_path)
    return row


def run_ladder(studio: Studio, request: GenerationRequest, *, warmup: int = 1, repeats: int = 3,
               progress: Progress | None = None, should_stop: StopFn | None = None) -> tuple[int, list[dict[str, Any]]]:
    """Run the rungs cumulatively; returns the group id and one row per rung."""
    group_id = studio.runlog.start_group("ladder", model=request.model, prompt=request.prompt, seed=request.seed,
                                         settings={"warmup": warmup, "repeats": repeats})
    current: tuple[str, ...] = ()
    rows, base = [], None
    for i, rung in enumerate(RUNGS):
        if progress:
            progress(i, len(RUNGS), rung.label)
        names, reason = choose(rung, request)
        if reason:
            rows.append(row(rung, "skipped", current, note=reason))
            continue
        opts = check_opts([o for o in current if o not in rung.remove] + list(names), request.spec, request.device)
        note = "" if names == rung.add else f"{'+'.join(rung.add)} cannot run here; used {'+'.join(names)}"
        try:
            result = studio.generate(studio.derive(request, opts), warmup=warmup, repeats=repeats,
                                     group_id=group_id, baseline=base, should_stop=should_stop)
        except Cancelled:
            studio.runlog.finish_group(group_id, "cancelled")
            raise
        except StudioError as exc:
            rows.append(row(rung, "failed", opts, note=str(exc)))
            continue
        base = base or result
        current = opts
        rows.append(row(rung, "ok", opts, result, base, note))
    studio.runlog.finish_group(group_id, "ok")
    return group_id, rows


def markdown(rows: list[dict[str, Any]]) -> str:
    """The ladder in the seed documents' format: latency and speedup 'x1.00'."""
    lines = ["| | Latency | Speedup |", "|---|---|---|"]
    for r in rows:
        if r["status"] == "ok":
            lines.append(f"| {r['step']} | {r['latency']:.2f}s | x{r['speedup']:.2f} |")
        else:
            lines.append(f"| {r['step']} | {r['status']}: {r['note']} | |")
    return "\n".join(lines)
