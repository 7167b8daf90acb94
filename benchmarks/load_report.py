"""The load benchmark's report (`python -m benchmarks.load`): one row per phase, throughput per client
count, the overflow phase's rejections, and a PASS/FAIL/SKIP line per target.
"""

from __future__ import annotations

import statistics
from collections import Counter

import psutil

from benchmarks.load_phases import Phase, med

THROUGHPUT_FLOOR, MEMORY_FLOOR = 0.90, 0.05
MB = 2**20


def pct(samples: list[float], q: int) -> float:
    if len(samples) < 2:
        return samples[0] if samples else float("nan")
    return statistics.quantiles(samples, n=100, method="inclusive")[q - 1]


HEADER = (
    f"{'phase':22} {'cl':>3} {'calls':>5} {'ok':>4} {'rej':>3} {'err':>3} {'img/s':>6} {'p50':>6} {'p95':>6} "
    f"{'p99':>6} {'wait':>6} {'srv':>6} {'gen':>6} {'gap':>6} {'lost':>4} {'RSS MB start/end/peak':>22}"
)


def row(p: Phase) -> str:
    ok = p.of("ok")
    lat = [c.latency for c in ok]
    rss = "/".join(f"{b / MB:.0f}" for b in (p.rss[0], p.rss[-1], max(p.rss)))
    return (
        f"{p.name:22} {p.clients:3} {len(p.calls):5} {len(ok):4} {len(p.of('rejected')):3} "
        f"{len(p.of('error')):3} {len(ok) / p.wall if p.wall else 0:6.2f} {pct(lat, 50):6.2f} "
        f"{pct(lat, 95):6.2f} "
        f"{pct(lat, 99):6.2f} {med([c.queue_wait for c in ok]):6.2f} {med([c.server_wait for c in ok]):6.2f} "
        f"{p.gen:6.2f} {p.gap:6.3f} {p.lost:4} {rss:>22}"
    )


def throughput(phases: list[Phase], clients: int) -> tuple[float, int, float]:
    """Images per second over every throughput phase at this client count: (img/s, images, seconds)."""
    mine = [p for p in phases if p.clients == clients]
    images, wall = sum(len(p.of("ok")) for p in mine), sum(p.wall for p in mine)
    return (images / wall if wall else 0.0), images, wall


def verdicts(
    every: list[Phase], tput: list[Phase], memory: Phase | None, overflow: Phase | None
) -> list[tuple[bool | None, str]]:
    """(passed, line) per floor, errors and lost runs over every phase (warm-up and overflow too); None when
    nothing measured it."""
    calls = sum(len(p.calls) for p in every)
    errors = [f"{p.name}: {c.message}" for p in every for c in p.of("error")]
    rejected = sum(len(p.of("rejected")) for p in every if p is not overflow)
    acked, lost = sum(len(p.of("ok")) for p in every), sum(p.lost for p in every)
    other = sum((p.other for p in every), Counter())
    out = [
        (
            not errors,
            f"errors: {len(errors)} in {calls} calls {dict(Counter(errors)) if errors else ''}".strip(),
        ),
        (not rejected, f"rejected outside the overflow phase: {rejected}"),
        (
            not lost,
            f"lost runs: {lost} ({acked} acknowledged; runs not ok in the log: {dict(other)}, "
            f"ok runs no client saw: {sum(p.unacked for p in every)})",
        ),
    ]
    counts = sorted({p.clients for p in tput})
    if 1 in counts and counts[-1] > 1:
        (one, _, _), (many, _, _) = throughput(tput, 1), throughput(tput, counts[-1])
        ratio = many / one if one else 0.0
        rounds = [[p for p in tput if p.round == r] for r in sorted({p.round for p in tput})]
        each = ", ".join(
            f"{throughput(r, counts[-1])[0] / (throughput(r, 1)[0] or float('nan')):.0%}" for r in rounds
        )
        out.append(
            (
                ratio >= THROUGHPUT_FLOOR,
                f"throughput: {counts[-1]} clients {many:.3f} img/s vs 1 client "
                f"{one:.3f} img/s = {ratio:.0%} (target >= {THROUGHPUT_FLOOR:.0%}; round by round: {each})",
            )
        )
    else:
        out.append((None, "throughput ratio: needs 1 and a larger count in --clients"))
    if memory:
        rss = memory.rss
        growth = rss[-1] / rss[0] - 1
        trend = "/".join(f"{rss[(len(rss) - 1) * k // 4] / MB:.0f}" for k in range(5))
        out.append(
            (
                growth <= MEMORY_FLOOR,
                f"memory: server RSS {rss[0] / MB:.0f} -> {rss[-1] / MB:.0f} MB over "
                f"{len(memory.calls)} runs = {growth:+.1%} (target <= {MEMORY_FLOOR:.0%}; after the warm-up "
                "and "
                f"throughput phases; at 0/25/50/75/100% of the phase: {trend} MB)",
            )
        )
    return out


def overflow_note(p: Phase, queue_max: int) -> str:
    rejected = [c.latency for c in p.of("rejected")]
    fastest = min((c.latency for c in p.of("ok")), default=float("nan"))
    return (
        f"overflow: {len(p.calls)} calls at once against max_size {queue_max}: {len(rejected)} rejected "
        f"(expected about {len(p.calls) - queue_max - 1}), {len(p.of('error'))} errors; a rejection took "
        f"{med(rejected):.3f} s (median), {max(rejected, default=float('nan')):.3f} s (max); "
        f"fastest accepted call {fastest:.2f} s"
    )


def print_report(
    steps: int,
    clients: list[int],
    queue_max: int,
    warmup: Phase,
    tput: list[Phase],
    memory: Phase | None,
    overflow: Phase | None,
) -> int:
    """Print every phase and the verdicts; 1 when a target was missed, else 0."""
    print(
        f"tiny-shapes fp32, {steps} steps, 64x64, CPU ({psutil.cpu_count()} cores), real app over HTTP, "
        f"max_size {queue_max}; seconds; p50/p95/p99: client latency; medians of wait: client-side queue "
        "wait, "
        f"srv: run created_at - submit, gen: the run log's latency, gap: server idle between runs"
    )
    phases = [warmup, *tput, *filter(None, (memory, overflow))]
    print(HEADER)
    for p in phases:
        print(row(p))
    for n in sorted(set(clients)):
        rate, images, wall = throughput(tput, n)
        print(f"{n} client(s): {rate:.3f} img/s ({images} images in {wall:.1f} s)")
    if overflow:
        print(overflow_note(overflow, queue_max))
    results = verdicts(phases, tput, memory, overflow)
    for passed, line in results:
        print(f"{'SKIP' if passed is None else 'PASS' if passed else 'FAIL'} {line}")
    return 1 if any(passed is False for passed, _ in results) else 0
