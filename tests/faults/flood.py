"""A flood of requests beyond the queue: the real app (queue of 2) and `clients` Generate calls at once, each
served or refused with a sentence, none dropped; the run log holds exactly the served ones. Returns an
`Outcome` (tests/faults/cases.py)."""

from __future__ import annotations

import sqlite3
from concurrent.futures import ThreadPoolExecutor
from time import perf_counter

from tests.faults.cases import Outcome, Workspace
from tests.server import Server, generate_args

QUEUE = 2


def flood_case(ws: Workspace, clients: int = 12) -> Outcome:
    from gradio_client import Client

    server = Server(ws.root / "flood", STUDIO_QUEUE_MAX=str(QUEUE))
    server.home.mkdir(exist_ok=True)
    server.start()
    try:
        client = Client(server.url, verbose=False)
        start = perf_counter()
        jobs = [
            client.submit(*generate_args(steps=20, seed=seed), api_name="/generate")
            for seed in range(clients)
        ]

        def outcome(job) -> tuple[str, float]:
            try:
                job.result(timeout=300)
                said = "served"
            except Exception as exc:  # the refusal's sentence is what this case reports
                said = str(exc)
            return said, perf_counter() - start

        with ThreadPoolExecutor(clients) as pool:
            answers = list(pool.map(outcome, jobs))
        served = [s for s, _ in answers if s == "served"]
        refused = [(s, t) for s, t in answers if s != "served" and "Queue is full" in s]
        healthy = client.predict(*generate_args(seed=99), api_name="/generate")[2]["latency_s"] > 0
    finally:
        server.stop()
    with sqlite3.connect(server.home / "runs.db") as db:
        logged = db.execute("select count(*) from runs where status = 'ok'").fetchone()[0]
    dropped = clients - len(served) - len(refused) + max(0, len(served) + 1 - logged)  # unanswered, unlogged
    facts = {"served": len(served), "refused": len(refused), "logged": logged, "answers": answers}
    said = refused[0][0] if refused else "(none refused)"
    slowest_refusal = max((t for _, t in refused), default=0.0)
    case = f"{clients} Generate requests at once, queue of {QUEUE}"
    alive = healthy and logged == len(served) + 1
    said = f"{said} ({len(served)} served, {len(refused)} refused)"
    return Outcome(case, said, slowest_refusal, dropped, alive, facts)
