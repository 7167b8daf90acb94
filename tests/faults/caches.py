"""Compile caches a user cannot count on: an OpenVINO cache folder or torch.compile's cache folder that cannot
be written, and an OpenVINO cache entry cut short (what a full disk or a killed build leaves). Each case
returns an `Outcome` (tests/faults/cases.py): the sentence is the warning the studio logs (stderr for the
CLI, the server's log for the UI), and the run itself goes on with the configuration rebuilt."""

from __future__ import annotations

import getpass
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from time import perf_counter
from typing import Any
from unittest import mock

import numpy as np

from studio.request import build_request
from tests.faults.cases import Outcome, Workspace, lost, serves, snapshot
from tests.faults.files import PROMPT

ROOT = Path(__file__).resolve().parents[2]
UNET_ONLY = {"openvino": {"vae": False, "text_encoder": False}}


class Warnings(logging.Handler):
    """The studio's warnings logged while it is attached."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.said: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.name.startswith("studio"):
            self.said.append(record.getMessage())


@contextmanager
def warnings_logged() -> Iterator[Warnings]:
    handler, studio_log = Warnings(), logging.getLogger("studio")
    level = studio_log.level
    studio_log.addHandler(handler)
    studio_log.setLevel(logging.WARNING)  # whatever the program's logging lets through
    try:
        yield handler
    finally:
        studio_log.removeHandler(handler)
        studio_log.setLevel(level)


def _pixels(result: Any) -> np.ndarray:
    return np.asarray(result.images[0], dtype=np.float32)


def _openvino_outcome(ws: Workspace, home: Path, db: str, case: str) -> Outcome:
    """A plain tiny-shapes run, then the same with OpenVINO's UNet, on a studio whose home is `home` (its
    pipelines keep nothing an earlier case converted): the warnings logged, the seconds of the OpenVINO run,
    the runs logged before it that it lost, and whether it drew the plain run's image."""
    fields = {"model": "tiny-shapes", "prompt": PROMPT, "steps": 2, "seed": 5}
    with mock.patch.dict(os.environ, {"STUDIO_HOME": str(home)}):
        studio = ws.studio(db, own_manager=True)
        plain = studio.generate(build_request(**fields))
        before = snapshot(studio.runlog)
        with warnings_logged() as logged:
            start = perf_counter()
            converted = studio.generate(
                build_request(optimizations=["openvino"], settings=UNET_ONLY, **fields)
            )
            seconds = perf_counter() - start
    difference = float(np.abs(_pixels(plain) - _pixels(converted)).max())
    facts = {"difference": difference, "run_id": converted.run_id}
    alive = converted.run_id is not None and difference <= 1.0  # at most 1 of 255: fp32 on both sides
    said = " ".join(logged.said) or "(no warning)"
    return Outcome(case, said, seconds, lost(studio.runlog, before), alive, facts)


def openvino_cache_unwritable_case(ws: Workspace) -> Outcome:
    """The OpenVINO cache folder (`$STUDIO_HOME/openvino`) is a file: not a folder anyone can write in."""
    home = ws.root / "openvino-unwritable"
    home.mkdir(exist_ok=True)
    (home / "openvino").write_text("not a folder")
    return _openvino_outcome(ws, home, "openvino-unwritable.db", "OpenVINO cache folder not writable")


def openvino_cache_truncated_case(ws: Workspace) -> Outcome:
    """Every entry of the OpenVINO cache cut short (its model.xml truncated), then the same run again."""
    home = ws.root / "openvino-truncated"
    _openvino_outcome(ws, home, "openvino-truncated.db", "")  # fills the cache
    entries = [p for p in (home / "openvino").iterdir() if (p / "model.xml").is_file()]
    for entry in entries:
        xml = entry / "model.xml"
        xml.write_text(xml.read_text()[:200])
    outcome = _openvino_outcome(ws, home, "openvino-truncated.db", "OpenVINO cache entry truncated")
    outcome.facts["entries"] = len(entries)
    outcome.facts["rewritten"] = all((e / "model.xml").stat().st_size > 200 for e in entries)
    return outcome


COMPILE = """
import os, sys, time
import studio  # before diffusers, as every face imports it
import diffusers, torch
start = time.perf_counter()
torch.manual_seed(0)
module = torch.nn.Sequential(torch.nn.Conv2d(3, 5, 3), torch.nn.GELU()).eval()
x = torch.randn(1, 3, 9, 11)
with torch.no_grad():
    same = torch.allclose(torch.compile(module)(x), module(x), atol=1e-5)
print(os.environ["TORCHINDUCTOR_CACHE_DIR"], same, time.perf_counter() - start)
"""


def compile_cache_unwritable_case(ws: Workspace) -> Outcome:
    """torch.compile's default cache folder (`torchinductor_<user>` in the temporary folder, no
    `TORCHINDUCTOR_CACHE_DIR` set) is a file, so it cannot be created: torch fails as soon as diffusers is
    imported, before any command starts, unless the studio moves it; and inductor's precompiled headers,
    which it keeps there whatever the cache folder, fail every kernel's build unless they move with it."""
    temporary = ws.root / "tmp"
    temporary.mkdir()
    (temporary / f"torchinductor_{getpass.getuser()}").write_text("not a folder")
    home = ws.root / "compile-home"
    env = {k: v for k, v in os.environ.items() if k != "TORCHINDUCTOR_CACHE_DIR"}
    env.update(TMPDIR=str(temporary), STUDIO_HOME=str(home), OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")
    start = perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", COMPILE], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )
    seconds = perf_counter() - start
    printed = done.stdout.split()
    used = Path(printed[0]) if done.returncode == 0 and len(printed) == 3 else None
    facts = {"stderr": done.stderr, "used": used, "home": home, "same": printed[1:2] == ["True"]}
    facts["headers"] = sorted(p.name for p in (used or home).glob("precompiled_headers/*.gch"))
    said = next(
        (line for line in done.stderr.splitlines() if "cache folder" in line),
        done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "(no warning)",
    )
    alive = used is not None and facts["same"] and serves(lambda: any(used.iterdir()))
    case = "torch.compile cache folder not writable"
    return Outcome(case, said, seconds, ws.ledger_lost(), alive, facts)
