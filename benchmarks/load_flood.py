"""Many visitors of a public studio and one who floods it: the real app started as a Space (`SPACE_ID` set, so
visitors are told apart and each may have `STUDIO_JOBS_PER_VISITOR` jobs waiting or running, default 2).

For each visitor count (default 1, 10 and 50), for `--duration` seconds: that many polite visitors, each its
own `gradio_client` Client, call /generate on tiny-shapes one call after the other; meanwhile one more visitor
sends `--flood` calls at once, again and again as they come back. Every call must come back with an image or a
sentence: the polite visitors' calls all with an image, the flooder's beyond its bound with the refusal.

Printed per count: the polite visitors' calls, images, errors, queue wait (client-side: submit to the first
PROCESSING update) and latency at p50 and p99; the flooder's images and refusals (with the sentence); runs
lost (an acknowledged image without its `ok` run in the run log); the server's RSS at the start and the end.
The queue holds the polite visitors and the flooder's bound (`STUDIO_QUEUE_MAX` = visitors + bound + 4).

Run: .venv/bin/python -m benchmarks.load_flood [--visitors 1,10,50 --duration 60 --flood 12 --steps 4]
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from gradio_client import Client

from benchmarks.load_phases import Budget, Call, Phase, Rss, audit, call_once, drive, runs_after
from benchmarks.load_report import MB, pct
from studio import devices
from tests.server import Server

log = logging.getLogger("benchmarks.load_flood")
BOUND = 2


def flood(url: str, jobs: int, until: float, steps: int, downloads: Path) -> list[Call]:
    """One visitor sending `jobs` calls at once, again as soon as they are all answered, until `until`."""
    client = Client(url, verbose=False, download_files=downloads)
    calls: list[Call] = []
    seed = 5_000_000
    try:
        with ThreadPoolExecutor(jobs) as pool:
            while time.perf_counter() < until:
                burst = [pool.submit(call_once, client, seed + i, steps) for i in range(jobs)]
                calls += [b.result() for b in burst]
                seed += jobs
    finally:
        client.close()
    return calls


def phase(server: Server, visitors: int, args: argparse.Namespace) -> tuple[Phase, list[Call]]:
    """The polite visitors' phase (audited against the run log) and the flooder's calls."""
    db = server.home / "runs.db"
    before = max(runs_after(db, 0), default=0)
    downloads = server.home / "downloads"
    flooded: list[Call] = []
    budget = Budget(seconds=args.duration)
    with Rss(server.proc.pid) as rss:
        until = time.perf_counter() + args.duration
        flooder = threading.Thread(
            target=lambda: flooded.extend(flood(server.url, args.flood, until, args.steps, downloads))
        )
        flooder.start()
        calls, wall = drive(server.url, visitors, budget, args.steps, visitors * 100_000, downloads)
        flooder.join()
    polite = Phase(f"{visitors} visitor(s)", visitors, calls + flooded, wall, rss.samples)
    audit(polite, db, before)  # every acknowledged image, the flooder's too, must be an ok run
    polite.calls = calls
    return polite, flooded


def report(visitors: int, polite: Phase, flooded: list[Call]) -> list[str]:
    ok = polite.of("ok")
    waits = [c.queue_wait for c in ok if c.queue_wait is not None]
    latencies = [c.latency for c in ok]
    refused = [c for c in flooded if c.outcome == "refused"]
    errors = [c for c in polite.calls + flooded if c.outcome not in ("ok", "refused")]
    sentence = refused[0].message.splitlines()[-1].lstrip("- ") if refused else "(none)"
    rss = f"{polite.rss[0] / MB:.0f} -> {polite.rss[-1] / MB:.0f} MB"
    return [
        f"| {visitors} | {len(polite.calls)} | {len(ok)} | {pct(waits, 50):.2f} s / {pct(waits, 99):.2f} s | "
        f"{pct(latencies, 50):.2f} s / {pct(latencies, 99):.2f} s | "
        f"{sum(c.outcome == 'ok' for c in flooded)} images, {len(refused)} refused | {len(errors)} | "
        f"{polite.lost} | {rss} |",
        f"  refusal: {sentence}",
        *(f"  error: {c.message}" for c in errors[:5]),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--visitors", default="1,10,50", help="polite visitor counts, comma-separated")
    parser.add_argument("--duration", type=float, default=60, help="seconds per count")
    parser.add_argument("--flood", type=int, default=12, help="calls the flooder sends at once")
    parser.add_argument("--steps", type=int, default=4)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    logging.getLogger("httpx").setLevel(logging.WARNING)
    counts = [int(n) for n in args.visitors.split(",")]
    print(f"CPU: {devices.detect().summary()['cpu_name']}; tiny-shapes 64x64, {args.steps} steps", flush=True)
    print(
        "| polite visitors | calls | images | queue wait p50 / p99 | latency p50 / p99 | flooder | errors "
        "| lost | server RSS |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    failed = False
    with tempfile.TemporaryDirectory(prefix="bench-flood-") as home:
        queue = max(counts) + BOUND + 4
        server = Server(Path(home), SPACE_ID="bench/studio", STUDIO_QUEUE_MAX=str(queue)).start()
        try:
            Client(server.url, verbose=False).predict(prompt="a red circle", steps=2, api_name="/generate")
            for visitors in counts:
                polite, flooded = phase(server, visitors, args)
                lines = report(visitors, polite, flooded)
                print("\n".join(lines), flush=True)
                failed |= any(line.startswith("  error") for line in lines) or polite.lost > 0
                failed |= not any(c.outcome == "refused" for c in flooded)
        finally:
            server.stop()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
