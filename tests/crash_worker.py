"""Studio processes for the crash-safety test, forked from one that has already imported the studio.

    python -m tests.crash_worker HOME

reads one seed per line on stdin; for each it forks a studio process on HOME/runs.db that generates runs
until it is killed, and answers with JSON lines on stdout:
  {"pid": P}                          the forked process (the test SIGKILLs it);
  {"ready": P, "running": [ids]}      its Studio is up: start-up recovery has run, no run of its own yet;
  {"ack": run_id, "image": path}      a run that `Studio.generate` returned, i.e. acknowledged;
  {"exited": P, "status": S}          the forked process is gone.
Forking skips the ~5 s of imports a fresh interpreter pays, and nothing else: each studio process opens
the database, loads the pipeline and writes its images itself, as `app.py` does, and dies with SIGKILL.
The parent only imports; it runs no torch operation, so the children start with no thread pool to inherit.
"""

from __future__ import annotations

import json
import os
import random
import sys
import traceback
from pathlib import Path

PROMPT = "a small red star on the right, on a black background"


def say(**message) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def serve(home: Path, seed: int) -> None:
    """One studio process: start up, then generate runs with random settings until killed."""
    from studio.engine import Studio
    from studio.request import build_request

    studio = Studio(db_path=home / "runs.db", outputs=home / "out")
    say(ready=os.getpid(), running=[r["id"] for r in studio.runlog.runs(status="running")])
    rng = random.Random(seed)
    while True:
        request = build_request(
            model="tiny-shapes",
            prompt=PROMPT,
            seed=rng.randrange(1000),
            steps=rng.choice([2, 4, 8]),
            width=64,
            height=64,
        )
        result = studio.generate(request)
        say(ack=result.run_id, image=result.image_paths[0])


def main(home: Path) -> None:
    # the imports every forked studio process shares (the packages import their names lazily: importing
    # `studio.engine` alone loads neither torch nor diffusers)
    from studio.engine import Studio  # noqa: F401
    from studio.request import build_request  # noqa: F401

    for line in sys.stdin:
        pid = os.fork()
        if pid == 0:
            try:
                serve(home, int(line))
            except BaseException:  # the test sees the traceback on stderr and a non-SIGKILL exit status
                traceback.print_exc()
            os._exit(1)
        say(pid=pid)
        _, status = os.waitpid(pid, 0)
        say(exited=pid, status=status)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
