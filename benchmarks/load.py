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
import logging
import sys
import tempfile
from pathlib import Path

from benchmarks.load_phases import Budget, Phase, run_phase
from benchmarks.load_report import print_report
from tests.server import Server

QUEUE_MARGIN = 8


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
    return print_report(args.steps, args.clients, queue_max, warmup, tput, memory, overflow)


if __name__ == "__main__":
    sys.exit(main())
