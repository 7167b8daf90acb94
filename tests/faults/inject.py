"""Real faults, injected where they strike: a full disk at the run log's or the PNG's write, another process
holding the run log's lock, a STUDIO_HOME this process may not write. Each is a context manager (or a call)
that tests/faults and `python -m benchmarks.faults` share."""

from __future__ import annotations

import contextlib
import errno
import functools
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from unittest import mock

from PIL import Image

NOBODY = 65534
FULL = "database or disk is full"  # SQLite's own words for SQLITE_FULL


class Disk:
    """The disk the run log writes to: `full` makes SQLite fail the run log's next writes (`statements`:
    the SQL verbs that fail) exactly as it does when the disk fills (OperationalError, 'database or disk is
    full'), so the studio's handling is the real one, down to SQLite's rollback."""

    def __init__(self) -> None:
        self.full = False
        self.statements = ("INSERT", "UPDATE")
        self.refused = 0

    def connection_class(self) -> type[sqlite3.Connection]:
        disk = self

        class FillingConnection(sqlite3.Connection):
            def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
                if disk.full and sql.lstrip().split(None, 1)[0].upper() in disk.statements:
                    disk.refused += 1
                    raise sqlite3.OperationalError(FULL)
                return super().execute(sql, *args)

        return FillingConnection


@contextlib.contextmanager
def filling_disk() -> Iterator[Disk]:
    """Run logs opened inside the block write through a `Disk` the caller fills (`disk.full = True`)."""
    disk = Disk()
    connect = functools.partial(sqlite3.connect, factory=disk.connection_class())
    with mock.patch("studio.runlog.safety.sqlite3.connect", connect):
        yield disk


@contextlib.contextmanager
def full_disk_for_images(outputs: Path) -> Iterator[list[str]]:
    """PNG writes under `outputs` fail with ENOSPC (No space left on device), as on a full disk; yields the
    paths refused."""
    refused: list[str] = []
    save = Image.Image.save

    def saving(image: Image.Image, fp: Any, *args: Any, **kwargs: Any) -> None:
        if isinstance(fp, str | Path) and Path(fp).is_relative_to(outputs):
            refused.append(str(fp))
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(fp))
        return save(image, fp, *args, **kwargs)

    with mock.patch.object(Image.Image, "save", saving):
        yield refused


HOLD = """
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
conn.execute("COMMIT")
"""


@contextlib.contextmanager
def locked_by_another_process(db: Path, seconds: float) -> Iterator[subprocess.Popen]:
    """Another process holds the database's write lock (`BEGIN EXCLUSIVE`) for `seconds` from the moment
    the block starts (as a database browser or a backup does), then lets go."""
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(db), str(seconds)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "locked", "the other process did not get the lock"
        yield holder
    finally:
        holder.wait(timeout=seconds + 30)


@contextlib.contextmanager
def read_only_home() -> Iterator[Path]:
    """A STUDIO_HOME others may read and nobody may write once the block's body calls `as_another_user`
    (the folder lies under the system's temporary folder: nobody else can reach pytest's)."""
    home = Path(tempfile.mkdtemp(prefix="studio-read-only-"))
    home.chmod(0o755)
    try:
        yield home
    finally:
        home.chmod(0o755)
        for path in sorted(home.rglob("*"), reverse=True):
            path.unlink() if path.is_file() else path.rmdir()
        home.rmdir()


def as_another_user(home: Path, task: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """`task()` run with `home` read-only to it: as this user with the write bits off, or, for root (whom
    permissions do not stop), in a forked child that has become `nobody`. Returns what `task` returns (JSON);
    a task that raises returns {"raised": "<type>: <message>"}."""
    for path in (home, *home.iterdir()):
        path.chmod(0o555 if path.is_dir() else 0o444)
    try:
        if os.geteuid() != 0:
            return _guarded(task)
        return _in_child_as_nobody(task)
    finally:
        for path in (home, *home.iterdir()):
            path.chmod(0o755 if path.is_dir() else 0o644)


def _guarded(task: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    try:
        return task()
    except Exception as exc:  # reported to the test, which asserts there was none
        return {"raised": f"{type(exc).__name__}: {exc}"}


def _in_child_as_nobody(task: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: become nobody, run the task, send its answer, leave without cleanup
        os.close(read)
        try:
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            answer = _guarded(task)
        except OSError as exc:
            answer = {"raised": f"could not become nobody: {exc}"}
        with os.fdopen(write, "wb") as pipe:
            pipe.write(json.dumps(answer, default=str).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        answer = pipe.read()
    os.waitpid(pid, 0)
    return json.loads(answer)
