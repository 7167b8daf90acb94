"""Compiled packages a user cannot count on (`aot_package`): one cut short, one built for another torch, a
packages folder that cannot be written, a disk that fills while a package is kept. Each case is a real run of
the bundled model through the engine; its sentence is the warning the run carries (Generate shows it, the API
and the CLI return it in `warnings`), and the run goes on compiled.

The bundled model's package is compiled once, for real, by the first case (`good_package`); the compile a
later case falls back to is that package copied into place (`copied_compile`), so the table times the studio's
handling of the fault rather than the C++ compiler a second time.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from time import perf_counter
from unittest import mock

import numpy as np
import torch

from studio.engine import Studio
from studio.manager import PipelineManager
from studio.optimizations import packages
from studio.request import build_request
from tests.faults.cases import Outcome, Workspace, lost, snapshot
from tests.faults.files import PROMPT

FIELDS = {"model": "tiny-shapes", "prompt": PROMPT, "steps": 2, "seed": 5}


def good_package(ws: Workspace) -> tuple[Path, np.ndarray]:
    """The bundled model's UNet package at the cases' shape, compiled once (really) in a home of its own, and
    the image it draws."""
    home = ws.root / "package-good"
    if not hasattr(ws, "package"):
        with mock.patch.dict(os.environ, {"STUDIO_HOME": str(home)}):
            result = ws.studio("package-good.db").generate(
                build_request(optimizations=["aot_package"], **FIELDS)
            )
        (entry,) = [p.parent for p in (home / "packages").glob("*/package.pt2")]
        ws.package = (entry, np.asarray(result.images[0]))
    return ws.package


@contextlib.contextmanager
def copied_compile(entry: Path) -> Iterator[list[str]]:
    """AOTInductor's compile replaced by a copy of `entry`'s package (the paths it was asked to write)."""
    asked: list[str] = []

    def compile_(exported, package_path=None, inductor_configs=None):
        asked.append(package_path)
        shutil.copy(entry / "package.pt2", package_path)
        return package_path

    with mock.patch.object(torch._inductor, "aoti_compile_and_package", compile_):
        yield asked


def _run(ws: Workspace, home: Path, case: str, settings: dict | None = None) -> Outcome:
    """A tiny-shapes run with aot_package on a new studio (as a new process: no package in memory) whose home
    is `home`: its warnings, its seconds, the runs logged before it that it lost, and whether it drew the good
    package's image."""
    entry, image = good_package(ws)
    db = f"{home.name}.db"
    with mock.patch.dict(os.environ, {"STUDIO_HOME": str(home)}), copied_compile(entry) as compiled:
        studio = Studio(db_path=ws.root / db, outputs=ws.root / f"out-{home.name}", manager=PipelineManager())
        before = snapshot(studio.runlog)
        start = perf_counter()
        result = studio.generate(build_request(optimizations=["aot_package"], settings=settings, **FIELDS))
        seconds = perf_counter() - start
    same = np.array_equal(np.asarray(result.images[0]), image)
    facts = {"compiled": len(compiled), "phase": result.metrics.get("first_call_phase"), "home": home}
    said = " ".join(w for w in result.warnings if "package" in w) or "(no warning)"
    return Outcome(
        case, said, seconds, lost(studio.runlog, before), result.run_id is not None and same, facts
    )


def truncated_case(ws: Workspace) -> Outcome:
    """The kept package cut short (what a full disk or a killed copy leaves)."""
    entry, _ = good_package(ws)
    home = ws.root / "package-truncated"
    kept = home / "packages" / entry.name
    shutil.copytree(entry, kept)
    (kept / "package.pt2").write_bytes((kept / "package.pt2").read_bytes()[:4096])
    outcome = _run(ws, home, "compiled package truncated")
    outcome.facts["rewritten"] = (kept / "package.pt2").stat().st_size == (
        entry / "package.pt2"
    ).stat().st_size
    return outcome


def foreign_case(ws: Workspace) -> Outcome:
    """A published package (`source`) built with another torch for a GPU."""
    entry, _ = good_package(ws)
    source = ws.root / "published-elsewhere"
    shutil.copytree(entry, source / entry.name, dirs_exist_ok=True)
    meta = json.loads((source / entry.name / "package.json").read_text())
    meta["environment"] = {"torch": "2.9.0+cu128", "device": "cuda", "capability": "9.0"}
    (source / entry.name / "package.json").write_text(json.dumps(meta))
    settings = {"aot_package": {"source": str(source)}}
    return _run(ws, ws.root / "package-foreign", "compiled package from another torch and device", settings)


def unwritable_case(ws: Workspace) -> Outcome:
    """The packages folder (`$STUDIO_HOME/packages`) is a file: nothing can be kept there."""
    home = ws.root / "package-unwritable"
    home.mkdir(exist_ok=True)
    (home / "packages").write_text("not a folder")
    return _run(ws, home, "packages folder not writable")


def disk_full_case(ws: Workspace) -> Outcome:
    """The disk fills as the new package is put in place."""
    home = ws.root / "package-disk-full"
    replace = os.replace

    def full(src, dst):
        if Path(dst).parent == home / "packages":
            raise OSError(errno.ENOSPC, "No space left on device")
        return replace(src, dst)

    with mock.patch.object(packages.os, "replace", full):
        outcome = _run(ws, home, "disk full while keeping a package")
    outcome.facts["left"] = sorted(p.name for p in (home / "packages").iterdir() if p.is_dir())
    return outcome


CASES = (truncated_case, foreign_case, unwritable_case, disk_full_case)
