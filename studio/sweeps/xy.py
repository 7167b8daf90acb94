"""X/Y Compare: the configurations at every value of an X axis (steps, size, scheduler, batch size, seed,
prompt, a LoRA's strength or a technique setting) and, optionally, of a Y axis, all timed in one interleaved
sweep, one group in the run log. Each point's speedup and image difference are against the baseline at the
same X and Y; with the batch axis, throughput and peak memory against batch size, and the batch with the
best throughput."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psutil

from studio import report
from studio.engine import Studio, memory_estimate
from studio.engine.run_data import RunResult
from studio.errors import ValidationError
from studio.measure.bench import StopFn
from studio.request import GenerationRequest
from studio.request.axes import Axis, at
from studio.sweeps.compare import parse_configs, records_of
from studio.sweeps.runner import Entry, Progress, SweepCancelled, SweepResult, run_sweep

MAX_POINTS = 40  # measured configurations in one X/Y sweep (baselines included)


@dataclass
class Point:
    """One cell of the grid: a configuration at one X value (and Y value), and its record (the shared
    vocabulary + `axis`, `x`, `y_axis`, `y`)."""

    x: str
    y: str | None  # None without a Y axis
    config: str
    record: dict[str, Any]
    result: RunResult | None


@dataclass
class XYResult:
    group_id: int
    axis: Axis
    configs: list[str]  # the baseline first
    points: list[Point]
    sweep: SweepResult
    y_axis: Axis | None = None

    @property
    def records(self) -> list[dict[str, Any]]:
        return [p.record for p in self.points]

    @property
    def y_values(self) -> tuple[str | None, ...]:
        return self.y_axis.values if self.y_axis else (None,)

    @property
    def rows(self) -> list[tuple[str, str | None]]:
        """The grid's rows: each configuration at each Y value (the configuration alone without a Y axis)."""
        return [(config, y) for config in self.configs for y in self.y_values]

    def row_label(self, config: str, y: str | None) -> str:
        return config if y is None else f"{config} · {self.y_axis.label(y)}"

    def point(self, x: str, config: str, y: str | None = None) -> Point:
        return next(p for p in self.points if p.x == x and p.config == config and p.y == y)

    def best_throughput(self) -> Point | None:
        """The point with the most images per second (for the batch axis: the best batch)."""
        ok = [p for p in self.points if p.record["images_per_s"] is not None]
        return max(ok, key=lambda p: p.record["images_per_s"], default=None)


Cell = tuple[str, str | None, str, GenerationRequest]  # x, y (None without a Y axis), config, request


def plan(
    request: GenerationRequest, configs: list[Any], axis: Axis, y_axis: Axis | None = None
) -> tuple[list[str], list[Cell], list[Entry]]:
    """The grid's configuration labels, its cells and the entries to measure: a request that is the same at
    several cells (the baseline on a setting axis) is measured once."""
    parsed = parse_configs(configs, request)
    for one in (axis, y_axis):
        if (
            one is not None
            and one.technique is not None
            and not any(one.technique in r.optimizations for r in parsed)
        ):
            raise ValidationError(
                f"No configuration uses {one.technique}, so the axis {one.name!r} changes nothing: add one."
            )

    def moved(r: GenerationRequest, x: str, y: str | None) -> GenerationRequest:
        return at(at(r, axis, x), y_axis, y) if y_axis is not None else at(r, axis, x)

    ys = y_axis.values if y_axis else (None,)
    cells = [(x, y, r.config_label, moved(r, x, y)) for y in ys for x in axis.values for r in parsed]
    entries: dict[tuple, Entry] = {}
    for x, y, config, req in cells:
        if key(req) not in entries:
            same_everywhere = sum(key(c[3]) == key(req) for c in cells) > 1
            where = axis.label(x) + ("" if y is None else f", {y_axis.label(y)}")
            label = config if same_everywhere else f"{config} @ {where}"
            base = entries.get(key(moved(parsed[0], x, y)))  # the baseline at this X and Y comes first
            entries[key(req)] = Entry(label, req, reference=label if base is None else base.label)
    return [r.config_label for r in parsed], cells, list(entries.values())


def fitting_batches(studio: Studio, request: GenerationRequest, axis: Axis) -> tuple[str, ...]:
    """The batch sizes of `axis` up to the largest whose estimated peak fits: the GPU's memory where it is
    known, else the memory this process has now plus what the machine has free."""
    room = psutil.Process().memory_info().rss + psutil.virtual_memory().available
    kept = []
    for value in axis.values:
        found = memory_estimate.estimate(studio.manager, at(request, axis, value), studio.runlog)
        if found.fits is False or (found.fits is None and found.known and found.peak > room):
            break
        kept.append(value)
    return tuple(kept) or axis.values[:1]


def key(request: GenerationRequest) -> tuple:
    """What makes two cells the same measurement."""
    return (
        request.config_label,
        request.steps,
        request.width,
        request.height,
        request.scheduler,
        request.batch,
        request.seed,
        request.prompt,
        tuple((str(a.file.path), a.scale) for a in request.loras),
    )


def run_xy(
    studio: Studio,
    request: GenerationRequest,
    configs: list[Any],
    axis: Axis,
    y_axis: Axis | None = None,
    *,
    warmup: int = 1,
    rounds: int = 3,
    progress: Progress | None = None,
    should_stop: StopFn | None = None,
) -> XYResult:
    """Every configuration at every X value (and Y value), interleaved in one sweep (one `xy` group in the run
    log).
    With batch 'auto', the batch sizes go up to the largest predicted to fit (`fitting_batches`). A cancelled
    sweep raises `SweepCancelled` with a record per measured point so far."""
    if axis.auto:
        axis = dataclasses.replace(axis, values=fitting_batches(studio, request, axis))
    labels, cells, entries = plan(request, configs, axis, y_axis)
    settings = {"axis": axis.name, "values": list(axis.values)}
    if y_axis is not None:
        settings.update(y_axis=y_axis.name, y_values=list(y_axis.values))
    try:
        sweep = run_sweep(
            studio,
            "xy",
            entries,
            warmup=warmup,
            rounds=rounds,
            settings=settings,
            progress=progress,
            should_stop=should_stop,
            max_configs=MAX_POINTS,
        )
    except SweepCancelled as exc:  # each measured point (its label names its X) with what it had
        exc.records = records_of(exc.partial)
        raise
    points = _points(sweep, cells, axis, y_axis)
    return XYResult(sweep.group_id, axis, labels, points, sweep, y_axis=y_axis)


def _points(sweep: SweepResult, cells: list[Cell], axis: Axis, y_axis: Axis | None) -> list[Point]:
    """Each cell of the grid with the record of the entry that measured it, against the baseline at its X
    and Y."""
    by_key = {key(e.request): e for e in sweep.entries}
    by_label = {e.label: e for e in sweep.entries}
    points = []
    for x, y, config, req in cells:
        entry = by_key[key(req)]
        if entry.result is None:
            record = report.failed_record(req.config_label, entry.error or "")
        else:
            base = by_label[entry.reference or sweep.entries[0].label].result
            record = report.run_record(entry.result, base)
        where = {"axis": axis.name, "x": x, "y_axis": y_axis.name if y_axis else None, "y": y}
        record = {**record, **where}
        points.append(Point(x, y, config, record, entry.result))
    return points


def table(result: XYResult, cell: Callable[[dict[str, Any]], str]) -> list[list[str]]:
    """A grid of words: one row per configuration (and Y value; its label first), one column per X value."""
    return [
        [result.row_label(c, y), *(cell(result.point(x, c, y).record) for x in result.axis.values)]
        for c, y in result.rows
    ]


def psnr_text(record: dict[str, Any]) -> str:
    if record["status"] != "ok":
        return record["status"]
    if record.get("verdict") == "baseline":
        return "baseline"
    return "identical" if record["psnr_db"] is None else f"{record['psnr_db']:.1f} dB"


def speedup_text(record: dict[str, Any]) -> str:
    return report.ratio(record) if record["status"] == "ok" else record["status"]


def _pixels(value: str) -> int:
    width, _, height = value.partition("x")
    return int(width) * int(height or width)


# What compares points across an axis, as (words, unit, seconds of a point's record at x): images per second
# across batch sizes; time per denoising step across step counts; per megapixel across sizes; otherwise
# (scheduler, a technique setting: the same work per image) the time per image.
PER_AXIS: dict[str, tuple[str, str, Callable[[dict[str, Any], str], float]]] = {
    "steps": ("Fastest per denoising step", "per step", lambda r, x: r["seconds_per_image"] / int(x)),
    "size": ("Fastest per pixel", "per megapixel", lambda r, x: r["seconds_per_image"] / _pixels(x) * 1e6),
}
PER_IMAGE = ("Fastest per image", "per image", lambda r, x: r["seconds_per_image"])


def summary(result: XYResult) -> str:
    """One sentence with the figure that compares points across this axis (`PER_AXIS`): for the batch axis
    the best throughput (images per second) and its batch."""
    ok = [p for p in result.points if p.record["status"] == "ok" and p.record["seconds_per_image"]]
    if not ok:
        return "No point of this sweep finished."
    if result.axis.name == "batch":
        best = result.best_throughput()
        r = best.record
        return (
            f"Best throughput: **{r['images_per_s']:.2f} images/s** with {best.config} at batch {best.x} "
            f"({report.seconds(r['seconds_per_image'])} per image)."
        )
    what, unit, cost = PER_AXIS.get(result.axis.name, PER_IMAGE)
    best = min(ok, key=lambda p: cost(p.record, p.x))
    figure = f"{report.seconds(cost(best.record, best.x))} {unit}"
    each = "" if unit == "per image" else f" ({report.seconds(best.record['seconds_per_image'])} per image)"
    where = result.axis.label(best.x) + ("" if best.y is None else f", {result.y_axis.label(best.y)}")
    return f"{what}: **{figure}** with {best.config} at {where}{each}."


def _figures(result: XYResult) -> tuple[str, Callable[[Point], str]]:
    """The title and cells of the markdown's grid of the figure that compares points across the axis."""
    if result.axis.name == "batch":
        return "Images per second", lambda p: f"{p.record['images_per_s']:.2f}"
    _, unit, cost = PER_AXIS.get(result.axis.name, PER_IMAGE)
    return f"Seconds {unit}", lambda p: report.seconds(cost(p.record, p.x))


def _cell(point: Point, figure: Callable[[Point], str]) -> str:
    return figure(point) if point.record["status"] == "ok" and point.record["seconds_per_image"] else "–"


def markdown(result: XYResult) -> str:
    """Speedup and image-difference grids and the best throughput, for the CLI and the Markdown export."""
    values = result.axis.values
    head = "| configuration | " + " | ".join(result.axis.label(x) for x in values) + " |"
    rule = "|---|" + "---|" * len(values)

    def grid(cell: Callable[[dict[str, Any]], str]) -> list[str]:
        return [head, rule, *("| " + " | ".join(row) + " |" for row in table(result, cell))]

    same = "X" if result.y_axis is None else "X and Y"
    lines = [f"Speedup against the baseline at the same {same} (per-round range):", ""]
    lines += [*grid(speedup_text), ""]
    lines += [f"Image difference from the baseline at the same {same} (PSNR):", "", *grid(psnr_text), ""]
    title, figure = _figures(result)
    cells = [
        [result.row_label(c, y), *(_cell(result.point(x, c, y), figure) for x in values)]
        for c, y in result.rows
    ]
    lines += [f"{title}:", "", head, rule, *("| " + " | ".join(row) + " |" for row in cells), ""]
    if result.axis.name == "batch":
        lines += ["Peak memory:", "", *grid(lambda r: report.memory(r) if r["status"] == "ok" else "–"), ""]
    lines.append(summary(result))
    note = report.host_note(result.records)
    return "\n".join(lines + ([note] if note else []))


def as_json(result: XYResult) -> dict[str, Any]:
    best = result.best_throughput()
    return {
        "group_id": result.group_id,
        "axis": result.axis.name,
        "values": list(result.axis.values),
        "y_axis": result.y_axis.name if result.y_axis else None,
        "y_values": list(result.y_axis.values) if result.y_axis else None,
        "configs": result.configs,
        "best_throughput": None if best is None else best.record,
        "grids": grids(result),
        "rows": result.records,
    }


def grids(result: XYResult) -> dict[str, list[list[str | None]]]:
    """Each configuration's grid of images as the run log keeps them: a row per Y value (one row without a Y
    axis), a column per X value, each the path of the image that point drew (None where it drew none)."""
    found = {}
    for config in result.configs:
        found[config] = [
            [result.point(x, config, y).record.get("image_path") for x in result.axis.values]
            for y in result.y_values
        ]
    return found
