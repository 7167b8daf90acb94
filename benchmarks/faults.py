"""Hostile files and real faults: what a user sees of each, how fast, and what the run log keeps.

Runs every case of tests/faults (the same hostile files and injected faults the tests use:
tests/faults/cases.py, runs.py, caches.py, sweeps.py and flood.py) in one process, on the bundled model, and
prints one table: the fault or input, the sentence the user saw (shortened; the case's folder is written
$TMP), the seconds to answer (for the flood: the slowest refusal), the runs lost from the run log (for a
database handed over: 1 if the file changed at all; for the flood: requests neither served nor refused),
whether the studio answered a normal request right after, and whether the log got a traceback. A few
minutes on two cores (the flood starts the app; the killed Compare runs in a process of its own).

Run: .venv/bin/python -m benchmarks.faults [--width 110] [--only 'LoRA:']
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import logging
import os
import re
import tempfile
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

from tests.faults import caches, cases, flood, loras, packages, runs, sweeps
from tests.faults.cases import Outcome, Workspace
from tests.server import studio_environment


class Tracebacks(logging.Handler):
    """Counts the log records that carry a traceback."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.count += record.exc_info is not None or "Traceback" in record.getMessage()


def every_case(ws: Workspace) -> list[Callable[[], Outcome]]:
    """The cases in the table's order: files first (no model), then the faults of a running studio."""
    named = [
        (cases.png_case, cases.PNGS),
        (cases.checkpoint_case, cases.CHECKPOINTS),
        (cases.run_log_file_case, cases.RUN_LOG_FILES),
        (cases.json_case, cases.JSONS),
        (loras.lora_case, loras.LORAS),
    ]
    files = [functools.partial(case, ws, name) for case, names in named for name in names]
    return [
        *files,
        functools.partial(runs.read_only_home_case, ws),
        functools.partial(runs.read_only_log_case, ws),
        functools.partial(runs.disk_full_case, ws, "start"),
        functools.partial(runs.disk_full_case, ws, "finish"),
        functools.partial(runs.image_disk_full_case, ws),
        functools.partial(runs.locked_case, ws, 1.0, 10.0),
        functools.partial(runs.locked_case, ws, 3.0, 0.5),
        *(
            [functools.partial(caches.openvino_cache_unwritable_case, ws)]
            + [functools.partial(caches.openvino_cache_truncated_case, ws)]
            if importlib.util.find_spec("openvino") and importlib.util.find_spec("nncf")
            else []
        ),
        functools.partial(caches.compile_cache_unwritable_case, ws),
        *(functools.partial(case, ws) for case in packages.CASES),
        functools.partial(sweeps.killed_compare_case, ws),
        functools.partial(sweeps.out_of_memory_case, ws),
        functools.partial(flood.flood_case, ws),
    ]


def shorten(text: str, width: int, root: str) -> str:
    text = re.sub(r"/\S*/studio-read-only-\w+", "$STUDIO_HOME", text.replace(root, "$TMP")).replace("|", "/")
    return text if len(text) <= width else text[: width - 1] + "…"


def table(rows: list[tuple[Outcome, int]], width: int, root: str) -> str:
    """The outcomes as one Markdown table."""
    lines = [
        "| fault or input | what the user saw | answer (s) | runs lost | alive | traceback in log |",
        "|---|---|---:|---:|---|---|",
    ]
    for outcome, tracebacks in rows:
        tracebacks += outcome.said.startswith(
            cases.CRASH
        )  # a face logs an unexpected error with its traceback
        lines.append(
            f"| {outcome.case} | {shorten(outcome.said, width, root)} | {outcome.seconds:.3f} | "
            f"{outcome.runs_lost} | {'yes' if outcome.alive else 'NO'} | {'YES' if tracebacks else 'no'} |"
        )
    return "\n".join(lines)


def forget_studio_settings() -> None:
    """Drop the user's STUDIO_* variables from this process's environment: every case sets up its own home,
    run log and limits under a temporary folder, and the servers and processes it starts inherit them."""
    clean = studio_environment()
    for name in [k for k in os.environ if k not in clean]:
        del os.environ[name]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.faults", description=__doc__.split("\n")[0])
    parser.add_argument("--width", type=int, default=110, help="characters of each sentence shown")
    parser.add_argument("--only", default="", help="only the file cases whose name starts so ('LoRA:')")
    args = parser.parse_args(argv)
    forget_studio_settings()
    torch.set_num_threads(1)  # times nothing but answers; one thread keeps a shared machine quiet
    logging.basicConfig(level=logging.ERROR, format="log: %(levelname)s %(name)s: %(message)s")
    counter = Tracebacks()
    logging.getLogger().addHandler(counter)
    rows = []
    with tempfile.TemporaryDirectory() as root:
        ws = Workspace(Path(root))
        chosen = [c for c in every_case(ws) if str((getattr(c, "args", ()) + ("",))[1]).startswith(args.only)]
        for case in chosen:
            before = counter.count
            rows.append((case(), counter.count - before))
        print(table(rows, args.width, root))


if __name__ == "__main__":
    main()
