"""Load test of the real app: N concurrent gradio_client users calling /generate on tiny-shapes.

The app runs as users run it (`python app.py`, tests.server.Server) on a temporary STUDIO_HOME, with
STUDIO_QUEUE_MAX = the largest client count + 8 so the throughput phases are never turned away. Phases:

1. warm-up: a few sequential calls (model load, first call); out of the throughput and memory figures.
2. throughput: for each client count, that many threads, each with its own Client, call /generate with
   fixed distinct seeds until the phase's time is up (a call started before the deadline completes).
   With --rounds 2 the counts are interleaved (1, 8, 1, 8), each phase getting duration / rounds.
3. memory: --runs-for-memory calls at the largest client count; the server's RSS (psutil) at its start
   and end. It runs after the warm-up and throughput phases, so the model load is not counted as growth.
4. overflow (--overflow EXTRA): max_size + 1 + EXTRA calls at once, so about EXTRA are turned away.

Queue wait is client-side: from submit to the first PROCESSING status update gradio_client received
(its SSE reader polls every 50 ms when idle, so it can be up to ~50 ms late). The server-side figure,
the run's created_at in the run log minus the submit time, is printed next to it as a cross-check.
After each phase the run log is read (read-only): every acknowledged run must be `ok` with its image;
`gen` (the runs' own latency) and `gap` (server idle between runs) tell a slower model from queue overhead.
Clients share one prebuilt SSL context (as the README recommends) and both sides' temporary files stay in
STUDIO_HOME.

Targets: 0 errors and 0 lost runs (every phase), throughput(8) >= 90% of throughput(1), memory growth
<= 5%; also 0 rejections outside the overflow phase. Exit status 1 if one fails. Clients and server share
the machine, so the clients' own CPU use is part of what is measured.

Run: .venv/bin/python -m benchmarks.load [--clients 1,8 --duration 60 --rounds 2 --runs-for-memory 200]
     .venv/bin/python -m benchmarks.load --quick --overflow    (15 s phases, 30 memory runs: a smoke test)
"""

from __future__ import annotations

import argparse
import datetime as dt
import logging
import os
import sqlite3
import ssl
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

import psutil
from gradio_client import Client
from gradio_client.utils import QueueError, Status

from tests.server import Server

log = logging.getLogger("benchmarks.load")
PROMPT = "a big red circle on the left, on a white background"
QUEUE_MARGIN = 8
THROUGHPUT_FLOOR, MEMORY_FLOOR = 0.90, 0.05
MB = 2**20


@dataclass
class Call:
    """One /generate call as a client saw it (times in seconds)."""

    seed: int
    start: float  # perf_counter at submit
    latency: float
    outcome: str  # ok / rejected / error
    submitted: float = 0.0  # epoch at submit
    queue_wait: float | None = None  # client-side: first PROCESSING update - submit
    server_wait: float | None = None  # server-side: run created_at - submit
    run_id: int | None = None
    message: str = ""


@dataclass
class Phase:
    """The calls of one phase, its wall time, the server's RSS and what the run log says about them."""

    name: str
    clients: int
    calls: list[Call]
    wall: float
    rss: list[int]  # the server's RSS in bytes, from the phase's start to its end, every 0.5 s
    round: int = 1
    lost: int = 0
    unacked: int = 0
    other: Counter = field(default_factory=Counter)
    gen: float = float("nan")  # server-side: median latency of the runs (the run log's latency_median)
    gap: float = float("nan")  # server-side: median idle time between one run's end and the next one's start

    def of(self, outcome: str) -> list[Call]:
        return [c for c in self.calls if c.outcome == outcome]


class Budget:
    """How many calls a phase may start: until `seconds` after the start, or `calls` in total."""

    def __init__(self, seconds: float | None = None, calls: int | None = None):
        self.seconds, self.calls, self.lock = seconds, calls, threading.Lock()
        self.started = 0.0

    def begin(self) -> None:
        self.started = time.perf_counter()

    def take(self) -> bool:
        if self.seconds is not None:
            return time.perf_counter() < self.started + self.seconds
        with self.lock:
            self.calls -= 1
            return self.calls >= 0


def processing_at(job) -> float | None:
    """Epoch time of the job's first PROCESSING status update (the job is finished: its queue is drained)."""
    if job.communicator is None:
        return None
    updates = job.communicator.updates
    while not updates.empty():
        update = updates.get_nowait()
        if getattr(update, "code", None) == Status.PROCESSING:
            return update.time.timestamp()
    return None


def call_once(client: Client, seed: int, steps: int) -> Call:
    """One /generate call on tiny-shapes; every failure is counted and its message kept for the report."""
    submitted, start = time.time(), time.perf_counter()
    job = client.submit(
        "tiny-shapes",
        "",
        "auto",
        "fp32",
        [],
        PROMPT,
        "",
        seed,
        steps,
        6.0,
        64,
        64,
        "default",
        "",
        api_name="/generate",
    )
    try:
        image, _card, metrics = job.result()
    except QueueError as exc:
        return Call(seed, start, time.perf_counter() - start, "rejected", submitted, message=str(exc))
    except Exception as exc:  # noqa: BLE001 (a load test reports every failure; none is hidden)
        return Call(
            seed,
            start,
            time.perf_counter() - start,
            "error",
            submitted,
            message=f"{type(exc).__name__}: {exc}",
        )
    latency = time.perf_counter() - start
    wait = processing_at(job)
    if not Path(image).is_file():
        return Call(seed, start, latency, "error", submitted, message=f"no image file at {image}")
    return Call(
        seed,
        start,
        latency,
        "ok",
        submitted,
        None if wait is None else wait - submitted,
        run_id=metrics["run_id"],
    )


def drive(
    url: str,
    clients: int,
    budget: Budget,
    steps: int,
    seed_base: int,
    downloads: Path,
    per_client: int | None = None,
) -> tuple[list[Call], float]:
    """`clients` threads, each with its own Client, released together; returns the calls and the wall time."""
    # One prebuilt SSL context (certificates still verified on https) spares gradio_client loading the CA
    # bundle for each of its per-request httpx clients (~40-75 ms of CPU each here, on the cores the
    # server needs).
    context = ssl.create_default_context()

    def connect(_: int) -> Client:
        return Client(url, verbose=False, ssl_verify=context, download_files=downloads)

    with ThreadPoolExecutor(clients) as pool:
        users = list(pool.map(connect, range(clients)))
    barrier = threading.Barrier(clients, action=budget.begin)

    def user(index: int) -> list[Call]:
        calls: list[Call] = []
        barrier.wait()
        while (per_client is None or len(calls) < per_client) and budget.take():
            calls.append(call_once(users[index], seed_base + index * 10_000 + len(calls), steps))
        return calls

    try:
        with ThreadPoolExecutor(clients) as pool:
            calls = [c for per_user in pool.map(user, range(clients)) for c in per_user]
    finally:
        for client in users:
            client.close()
    wall = max((c.start + c.latency for c in calls), default=budget.started) - budget.started
    return calls, wall


class Rss:
    """The server's resident memory at enter and exit, sampled every 0.5 s in between."""

    def __init__(self, pid: int):
        self.proc, self.stop = psutil.Process(pid), threading.Event()

    def __enter__(self) -> Rss:
        self.samples = [self.proc.memory_info().rss]
        self.thread = threading.Thread(target=self._sample, daemon=True)
        self.thread.start()
        return self

    def _sample(self) -> None:
        while not self.stop.wait(0.5):
            self.samples.append(self.proc.memory_info().rss)

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join()
        self.samples.append(self.proc.memory_info().rss)


def runs_after(db: Path, run_id: int) -> dict[int, tuple]:
    """Runs logged after `run_id`: id -> (status, image_path, created_at, finished_at, latency_median), by id;
    the database opened read-only."""
    with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
        rows = conn.execute(
            "SELECT id, status, image_path, created_at, finished_at, latency_median FROM runs "
            "WHERE id > ? ORDER BY id",
            (run_id,),
        )
        return {r[0]: r[1:] for r in rows}


def epoch(iso: str | None) -> float:
    return dt.datetime.fromisoformat(iso).timestamp() if iso else float("nan")


def audit(phase: Phase, db: Path, before: int) -> None:
    """Lost = acknowledged calls without an `ok` run and its image; also the server-side figures."""
    runs = runs_after(db, before)
    acked = phase.of("ok")
    for c in acked:
        status, image, created, *_ = runs.get(c.run_id, ("missing", None, None))
        if status == "ok" and image and Path(image).is_file():
            c.server_wait = epoch(created) - c.submitted
        else:
            phase.lost += 1
    rows = list(runs.values())
    phase.gen = med([r[4] for r in rows if r[0] == "ok"])
    phase.gap = med([epoch(b[2]) - epoch(a[3]) for a, b in zip(rows, rows[1:], strict=False)])
    phase.unacked = len({i for i, r in runs.items() if r[0] == "ok"} - {c.run_id for c in acked})
    phase.other = Counter(r[0] for r in runs.values() if r[0] != "ok")


def run_phase(
    server: Server,
    name: str,
    clients: int,
    budget: Budget,
    steps: int,
    seed_base: int,
    per_client: int | None = None,
    round_: int = 1,
) -> Phase:
    db = server.home / "runs.db"
    before = max(runs_after(db, 0), default=0)
    log.info("phase %s: %d client(s)...", name, clients)
    with Rss(server.proc.pid) as rss:
        calls, wall = drive(
            server.url, clients, budget, steps, seed_base, server.home / "downloads", per_client
        )
    phase = Phase(name, clients, calls, wall, rss.samples, round_)
    audit(phase, db, before)
    return phase


def pct(samples: list[float], q: int) -> float:
    if len(samples) < 2:
        return samples[0] if samples else float("nan")
    return statistics.quantiles(samples, n=100, method="inclusive")[q - 1]


def med(samples: list[float | None]) -> float:
    got = [s for s in samples if s is not None]
    return statistics.median(got) if got else float("nan")


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


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--clients", default="1,8", help="client counts, comma-separated")
    parser.add_argument(
        "--duration", type=float, default=60, help="seconds per client count (split over rounds)"
    )
    parser.add_argument("--rounds", type=int, default=2, help="interleave the client counts this many times")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3, help="sequential calls before anything is measured")
    parser.add_argument("--runs-for-memory", type=int, default=200, help="0 skips the memory phase")
    parser.add_argument("--memory-clients", type=int, help="default: the largest client count")
    parser.add_argument(
        "--overflow",
        type=int,
        nargs="?",
        const=8,
        default=0,
        help="send max_size + 1 + EXTRA calls at once (default EXTRA 8)",
    )
    parser.add_argument("--quick", action="store_true", help="15 s phases, one round, 30 memory runs")
    args = parser.parse_args(argv)
    args.clients = [int(n) for n in args.clients.split(",")]
    args.memory_clients = args.memory_clients or max(args.clients)
    if args.quick:
        args.duration, args.rounds, args.runs_for_memory = 15, 1, min(args.runs_for_memory, 30)
    return args


def run_all(
    server: Server, args: argparse.Namespace, queue_max: int
) -> tuple[Phase, list[Phase], Phase | None, Phase | None]:
    seeds = iter(range(0, 10**9, 10**6))
    warmup = run_phase(server, "warm-up", 1, Budget(calls=args.warmup), args.steps, next(seeds))
    tput = [
        run_phase(
            server,
            f"{n} client(s), round {r}",
            n,
            Budget(seconds=args.duration / args.rounds),
            args.steps,
            next(seeds),
            round_=r,
        )
        for r in range(1, args.rounds + 1)
        for n in args.clients
    ]
    memory = overflow = None
    if args.runs_for_memory:
        memory = run_phase(
            server, "memory", args.memory_clients, Budget(calls=args.runs_for_memory), args.steps, next(seeds)
        )
    if args.overflow:
        n = queue_max + 1 + args.overflow
        overflow = run_phase(server, "overflow", n, Budget(calls=n), args.steps, next(seeds), per_client=1)
    return warmup, tput, memory, overflow


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per HTTP request otherwise
    queue_max = max(*args.clients, args.memory_clients) + QUEUE_MARGIN
    with tempfile.TemporaryDirectory(prefix="bench-load-") as home:
        tmp = Path(home, "tmp")
        tmp.mkdir()
        # Everything both sides write (Gradio's file cache, gradio_client's downloads and the empty
        # directories it leaves per download) stays under `home` and goes with it.
        tempfile.tempdir, saved = str(tmp), tempfile.tempdir
        server = Server(
            Path(home), STUDIO_QUEUE_MAX=str(queue_max), GRADIO_TEMP_DIR=str(tmp), TMPDIR=str(tmp)
        )
        try:
            warmup, tput, memory, overflow = run_all(server.start(), args, queue_max)
        finally:
            server.stop()
            tempfile.tempdir = saved
    print(
        f"tiny-shapes fp32, {args.steps} steps, 64x64, CPU ({psutil.cpu_count()} cores), real app over HTTP, "
        f"max_size {queue_max}; seconds; p50/p95/p99: client latency; medians of wait: client-side queue "
        "wait, "
        f"srv: run created_at - submit, gen: the run log's latency, gap: server idle between runs"
    )
    phases = [warmup, *tput, *filter(None, (memory, overflow))]
    print(HEADER)
    for p in phases:
        print(row(p))
    for n in sorted(set(args.clients)):
        rate, images, wall = throughput(tput, n)
        print(f"{n} client(s): {rate:.3f} img/s ({images} images in {wall:.1f} s)")
    if overflow:
        print(overflow_note(overflow, queue_max))
    results = verdicts(phases, tput, memory, overflow)
    for passed, line in results:
        print(f"{'SKIP' if passed is None else 'PASS' if passed else 'FAIL'} {line}")
    return 1 if any(passed is False for passed, _ in results) else 0


if __name__ == "__main__":
    sys.exit(main())
