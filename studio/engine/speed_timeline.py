"""Did it get slower? One configuration's logged runs on this machine, in the order they ran, grouped by the
library versions they ran under, each change of versions marked and judged.

A run belongs to the timeline of a request when it finished ok with the same model, configuration, size,
steps, batch and device, on the same CPU and GPUs (`hardware`). Consecutive runs under one set of the
versions that change speed (`TRACKED`) form an era; each era says its seconds per image (the median of its
runs'), their spread (max - min; one run: its own timed calls' spread) and the host's busy share. The verdict
between an era and the one before it is `protocol.apart`'s: the two were measured apart, not interleaved.
"""

from __future__ import annotations

import itertools
import statistics
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from studio import visitors
from studio.measure import protocol
from studio.report import seconds

if TYPE_CHECKING:
    from studio.request import GenerationRequest
    from studio.runlog import RunLog

TRACKED = ("torch", "diffusers", "transformers", "accelerate", "openvino", "nncf", "torchao", "studio")
HISTORY = 1000  # the model's runs looked at, newest first


@dataclass(frozen=True)
class Era:
    """Consecutive runs under one set of versions."""

    versions: dict[str, str]
    first_at: str
    last_at: str
    runs: tuple[int, ...]
    seconds_per_image: float
    spread_s: float | None
    host_busy_pct: float | None
    changed: tuple[str, ...] = ()  # the tracked libraries whose version differs from the era before
    verdict: str | None = None  # against the era before; None for the first
    change_pct: float | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "versions": self.versions,
            "first_at": self.first_at,
            "last_at": self.last_at,
            "runs": list(self.runs),
            "seconds_per_image": round(self.seconds_per_image, 4),
            "spread_s": None if self.spread_s is None else round(self.spread_s, 4),
            "host_busy_pct": self.host_busy_pct,
            "changed": list(self.changed),
            "verdict": self.verdict,
            "change_pct": self.change_pct,
        }


def _matches(run: dict[str, Any], request: GenerationRequest, hardware: dict[str, Any]) -> bool:
    same = (
        run.get("status") == "ok"
        and run.get("latency_s") is not None
        and run.get("config_label") == request.config_label
        and (run.get("width"), run.get("height"), run.get("steps"))
        == (request.width, request.height, request.steps)
        and (run.get("batch") or 1) == request.batch
        and run.get("device") == request.device
    )
    mine = run.get("hardware") or {}
    return same and all(mine.get(k) == hardware.get(k) for k in ("cpu_name", "cpu_count", "gpus"))


def _versions(run: dict[str, Any]) -> dict[str, str]:
    return {k: (run.get("versions") or {}).get(k, "not recorded") for k in TRACKED}


def _era(runs: list[dict[str, Any]]) -> Era:
    per_image = [r["latency_s"] / (r.get("batch") or 1) for r in runs]
    if len(runs) > 1:
        spread: float | None = max(per_image) - min(per_image)
    else:
        low, high = runs[0].get("latency_min"), runs[0].get("latency_max")
        timed = runs[0].get("rounds") or 0
        spread = (high - low) / (runs[0].get("batch") or 1) if None not in (low, high) and timed > 1 else None
    busy = [r["host_busy_pct"] for r in runs if r.get("host_busy_pct") is not None]
    return Era(
        versions=_versions(runs[0]),
        first_at=runs[0]["created_at"],
        last_at=runs[-1]["created_at"],
        runs=tuple(r["id"] for r in runs),
        seconds_per_image=statistics.median(per_image),
        spread_s=spread,
        host_busy_pct=round(statistics.median(busy), 1) if busy else None,
    )


def timeline(runlog: RunLog, request: GenerationRequest, hardware: dict[str, Any]) -> list[Era]:
    """The eras of `request`'s configuration on the machine `hardware` describes (a
    `devices.detect().summary()`), oldest first, each judged against the one before; of the current visitor's
    runs alone on a public studio (`studio.visitors`)."""
    runs = [
        r
        for r in runlog.runs(model=request.model, status="ok", visitor=visitors.scope(), limit=HISTORY)
        if _matches(r, request, hardware)
    ]
    runs.sort(key=lambda r: r["id"])
    groups = [list(g) for _, g in itertools.groupby(runs, key=_versions)]
    eras: list[Era] = []
    for group in groups:
        era = _era(group)
        if eras:
            before = eras[-1]
            changed = tuple(k for k in TRACKED if era.versions[k] != before.versions[k])
            verdict = protocol.apart(
                before.seconds_per_image, before.spread_s, era.seconds_per_image, era.spread_s
            )
            pct = round(100 * (era.seconds_per_image / before.seconds_per_image - 1), 1)
            era = Era(**{**era.__dict__, "changed": changed, "verdict": verdict, "change_pct": pct})
        eras.append(era)
    return eras


def markdown(request: GenerationRequest, eras: list[Era], machine: str) -> str:
    """The timeline as one Markdown block to paste into an issue: the machine, the configuration, each era
    with its versions (changes in bold), its figures and its verdict, and the caveat."""
    lines = [
        f"**{request.config_label}** on `{request.model}`, {request.width}x{request.height}, "
        f"{request.steps} steps, batch {request.batch}, {request.device} — {machine}",
        "",
        "| runs | when | versions | s / image (spread) | host busy | against the versions before |",
        "|---|---|---|---|---|---|",
    ]
    for era in eras:
        versions = ", ".join(
            f"**{k} {v}**" if k in era.changed else f"{k} {v}"
            for k, v in era.versions.items()
            if v != "not recorded"
        )
        spread = f" (±{seconds(era.spread_s / 2)})" if era.spread_s is not None else ""
        busy = "–" if era.host_busy_pct is None else f"{era.host_busy_pct:.0f}%"
        judged = "–" if era.verdict is None else f"{era.verdict} ({era.change_pct:+.1f}%)"
        when = (
            era.first_at[:10]
            if era.first_at[:10] == era.last_at[:10]
            else f"{era.first_at[:10]} – {era.last_at[:10]}"
        )
        figure = f"{seconds(era.seconds_per_image)}{spread}"
        lines.append(f"| {len(era.runs)} | {when} | {versions} | {figure} | {busy} | {judged} |")
    lines += ["", f"The eras were {protocol.APART_CAVEAT}."]
    return "\n".join(lines)


def timeline_request(
    *, model: Any, config: Any, steps: Any, width: Any, height: Any, batch: Any, device: Any
) -> GenerationRequest:
    """The request whose runs a timeline gathers, from what a face was given: a configuration as Compare
    writes it ('baseline', 'bf16+channels_last') at a size (None: the model's own), checked at the request's
    door."""
    from studio.request import build_request
    from studio.request.configs import parse_config

    names, settings = parse_config("baseline" if config in (None, "") else config)
    return build_request(
        model=model or "tiny-shapes",
        prompt="-",
        steps=steps,
        width=width,
        height=height,
        batch=1 if batch in (None, "") else batch,
        device=device or "auto",
        optimizations=names,
        settings=settings,
    )


def machine_words(hardware: dict[str, Any]) -> str:
    """The machine a timeline is of, in words: 'Intel Xeon ... (family 6 ...), 2 cores, NVIDIA H100'."""
    gpus = "".join(f", {g['name']}" for g in hardware["gpus"])
    return f"{hardware['cpu_name']}, {hardware['cpu_count']} cores{gpus}"
