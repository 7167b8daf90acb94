"""Every hostile input and fault of tests/faults as one case: it builds the file or injects the fault, does
what a user does (loads the image, names the checkpoint, opens the database, runs a generation), and says
what the user saw: the sentence, the seconds to answer, the runs lost from the run log, and whether the
studio still serves a normal request afterwards. tests/faults assert on these outcomes (and on the `facts`
each case gathers); `python -m benchmarks.faults` prints them as one table."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from time import perf_counter
from typing import Any
from unittest import mock

from studio import checks
from studio.errors import StudioError, describe
from studio.report import image_metadata
from studio.request import build_request
from studio.runlog import RunLog
from tests.faults import files

PROMPT = files.PROMPT
CRASH = "CRASH"


@dataclass
class Outcome:
    """What a user saw of one case; `facts` holds what a test checks beyond the table."""

    case: str
    said: str
    seconds: float
    runs_lost: int
    alive: bool
    facts: dict[str, Any] = field(default_factory=dict)


def answer(call: Callable[[], str]) -> tuple[str, float]:
    """What a user sees from `call`: the sentence it returns or raises (a StudioError), and the seconds it
    took; any other exception is a crash, said as `CRASH <type>: <message>`."""
    start = perf_counter()
    try:
        said = call()
    except StudioError as exc:
        said = describe(exc)
    except Exception as exc:  # what the table exists to show, should a change bring one back
        said = f"{CRASH} {type(exc).__name__}: {exc}"
    return said, perf_counter() - start


def serves(call: Callable[[], Any]) -> bool:
    """Whether a normal request still gets its normal answer."""
    said, _ = answer(lambda: "ok" if call() else "no answer")
    return said == "ok"


class Workspace:
    """A folder for the cases: hostile files go in it; studios on their own run logs in it share one
    pipeline manager (the bundled model is loaded once); `ledger` is a run log written before any case, so
    that every case can say how many of its runs it lost."""

    def __init__(self, root: Path):
        self.root = root
        self._manager = None
        self.ledger = RunLog(root / "ledger.db")
        for seed in range(3):
            self.ledger.finish_run(self.ledger.start_run({"model": "tiny-shapes", "seed": seed}), "ok")
        self.logged = snapshot(self.ledger)

    def studio(self, db: str, timeout: float | None = None, own_manager: bool = False):
        """A Studio on the run log `db` in the folder; `timeout`: the seconds its writes wait for a lock;
        `own_manager`: pipelines of its own, not the folder's shared ones (nothing built by an earlier case is
        kept in them)."""
        from studio.engine import Studio
        from studio.manager import PipelineManager
        from studio.optimizations import REGISTRY

        self._manager = self._manager or PipelineManager()
        outputs = self.root / f"out-{Path(db).stem}"
        manager = PipelineManager() if own_manager else self._manager
        studio = Studio(db_path=self.root / db, outputs=outputs, manager=manager)
        if timeout is not None:
            studio.runlog = RunLog(studio.runlog.path, tuple(REGISTRY), timeout=timeout)
        return studio

    def ledger_lost(self) -> int:
        return lost(RunLog(self.ledger.path), self.logged)


def snapshot(log: RunLog) -> dict[int, dict[str, Any]]:
    return {row["id"]: row for row in log.runs(limit=10_000)}


def lost(log: RunLog, before: dict[int, dict[str, Any]]) -> int:
    """How many of the runs in `before` the run log no longer holds as they were (all, if it is damaged)."""
    if log.db.execute("PRAGMA integrity_check").fetchone() != ("ok",):
        return len(before)
    now = snapshot(log)
    return sum(now.get(run_id) != row for run_id, row in before.items())


# -- files a user hands the studio -------------------------------------------------------------------------

PNGS = {
    "PNG: decompression bomb (40,000² px, 0.2 MB)": files.bomb_png,
    "PNG: truncated inside its pixels": files.truncated_png,
    "PNG: a text file named .png": files.not_an_image,
    "PNG: 5 MB text chunk": files.huge_text_png,
    "PNG: text chunk inflating to 50 MB": files.zlib_bomb_png,
    "PNG: studio JSON nested 30,000 deep": files.deep_json_png,
    "PNG: settings outside a request": files.outside_png,
    "PNG: A1111 text, bad escape, 5,000 digits": files.broken_a1111_png,
}


def load_from_image(path: Path) -> str:
    """What "Load from image" says: `read`'s sentence, then, for settings it found, whether they pass the
    checks of a typed request (how the UI is to use them: docs/faults.md)."""
    found = image_metadata.read(path)
    if found.settings is None:
        return found.message
    try:
        build_request(**image_metadata.fields_from_settings(found.settings, "tiny-shapes"))
    except StudioError as exc:
        return f"{found.message} Refused as a request: {describe(exc)}"
    return f"{found.message} Accepted as a request."


def png_case(ws: Workspace, name: str) -> Outcome:
    path = PNGS[name](ws.root)
    said, seconds = answer(lambda: load_from_image(path))
    good = files.png(ws.root / "good.png", files.text("diffusion-studio", files.studio_json()))
    alive = serves(lambda: image_metadata.read(good).settings)
    return Outcome(name, said, seconds, ws.ledger_lost(), alive, {"path": path})


CHECKPOINTS = {
    "checkpoint: header length 10^12 in 0.1 kB": (files.lying_length, "model"),
    "checkpoint: tensor offsets past the end": (files.offsets_past_end, "model"),
    "checkpoint: header not JSON": (files.header_not_json, "model"),
    "checkpoint: header nested 100,000 deep": (files.deep_header, "model"),
    "checkpoint: cut in half": (files.truncated_checkpoint, "model"),
    "checkpoint: torch.save zip renamed": (files.pickle_renamed, "model"),
    "checkpoint: bare pickle renamed": (functools.partial(files.pickle_renamed, zipped=False), "model"),
    "VAE: .safetensors cut in half": (files.truncated_checkpoint, "vae"),
}


def checkpoint_case(ws: Workspace, name: str) -> Outcome:
    """A hostile .safetensors named as a request's model (or VAE), inside the allowed roots."""
    build, role = CHECKPOINTS[name]
    path = build(ws.root)
    fields = {"model": str(path)} if role == "model" else {"model": "tiny-shapes", "vae": str(path)}
    with mock.patch.dict(os.environ, {"STUDIO_MODEL_ROOTS": str(ws.root)}):
        said, seconds = answer(lambda: f"accepted: {build_request(prompt=PROMPT, **fields).spec.id}")
        good = str(files.checkpoint(ws.root, "good.safetensors"))
        alive = serves(lambda: build_request(model=good, prompt=PROMPT))
    return Outcome(name, said, seconds, ws.ledger_lost(), alive, {"path": path})


RUN_LOG_FILES: dict[str, Callable[[Workspace], Path]] = {
    "run log: a text file": lambda ws: files.not_sqlite(ws.root),
    "run log: another program's SQLite": lambda ws: files.foreign_sqlite(ws.root),
    "run log: damaged pages": lambda ws: files.damaged_copy(ws.ledger.path, ws.root),
}


def run_log_file_case(ws: Workspace, name: str) -> Outcome:
    """A database handed to the studio as its run log; `runs_lost` is 1 if the file changed at all."""
    path = RUN_LOG_FILES[name](ws)
    before = path.read_bytes()
    said, seconds = answer(lambda: f"opened, {len(RunLog(path).runs())} runs")
    changed = int(path.read_bytes() != before)
    alive = serves(lambda: RunLog(ws.root / "fresh.db").start_run({"model": "tiny-shapes"}))
    return Outcome(name, said, seconds, changed + ws.ledger_lost(), alive, {"path": path})


DEEP = "[" * 100_000 + "]" * 100_000
JSONS: dict[str, Callable[[], Any]] = {
    "JSON nested 100,000 deep (checks.parse_json)": lambda: checks.parse_json("settings", DEEP),
    "request settings nested 100,000 deep": lambda: build_request(
        model="tiny-shapes", prompt=PROMPT, settings=DEEP
    ),
}


def json_case(ws: Workspace, name: str) -> Outcome:
    said, seconds = answer(lambda: f"parsed: {JSONS[name]()!r:.60}")
    alive = serves(lambda: checks.parse_json("settings", '{"deepcache": {"interval": 2}}'))
    return Outcome(name, said, seconds, ws.ledger_lost(), alive)
