"""The phases of the load benchmark (`python -m benchmarks.load`) and what the run log says about them.

A phase releases N threads together, each with its own gradio_client Client calling /generate on
tiny-shapes until its budget (seconds or calls) is spent, while the server's RSS is sampled; afterwards the
run log is read (read-only) to count lost runs and the server-side figures (`gen`, `gap`, `srv`).
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import sqlite3
import ssl
import statistics
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
from gradio_client.exceptions import ValidationError
from gradio_client.utils import QueueError, Status

from tests.server import Server

log = logging.getLogger("benchmarks.load")
PROMPT = "a big red circle on the left, on a white background"


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
    gen: float = float("nan")  # server-side: median latency of the runs (the run log's latency_s)
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
    except ValidationError as exc:  # a public studio's answer past a visitor's bound (`load_flood`)
        return Call(seed, start, time.perf_counter() - start, "refused", submitted, message=str(exc))
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
    """Runs logged after `run_id`: id -> (status, image_path, created_at, finished_at, latency_s), by id;
    the database opened read-only."""
    with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
        rows = conn.execute(
            "SELECT id, status, image_path, created_at, finished_at, latency_s FROM runs "
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


def med(samples: list[float | None]) -> float:
    got = [s for s in samples if s is not None]
    return statistics.median(got) if got else float("nan")
