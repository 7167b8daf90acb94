"""What keeps the run log whole when its file or its disk misbehaves.

A file handed to the studio as its run log is checked before anything writes to it: one that is not SQLite,
or a SQLite database of another program, is refused and left byte for byte as it was. A run log the studio
may not write (a read-only STUDIO_HOME) opens read-only: history reads, runs are not recorded. Every SQLite
failure (locked, full disk, read-only, damaged) becomes one sentence saying what happened to the data and
what to do (`sentence`).
"""

from __future__ import annotations

import errno
import functools
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote

from studio.errors import RunLogError

SQLITE_MAGIC = b"SQLite format 3\x00"
TABLES = {"runs", "groups"}
DEFAULT_TIMEOUT = 30.0  # seconds a write waits for another program's lock
UNRECORDED = "this run is not in the run log"
DEFERRED = (
    "this run's results wait in memory and are written with the next run (if the studio stops first, the run "
    "shows as interrupted)"
)


def check_file(path: Path) -> None:
    """Refuse a file that is not a SQLite database (an empty or missing one becomes a new run log)."""
    try:
        with path.open("rb") as f:
            start = f.read(len(SQLITE_MAGIC))
    except FileNotFoundError:
        return
    except OSError as exc:
        raise RunLogError(
            f"The run log {path} could not be read ({exc.strerror or exc}). Fix its permissions or point "
            "STUDIO_DB at another file."
        ) from None
    if start and start != SQLITE_MAGIC:
        raise RunLogError(
            f"{path} is not a SQLite database, so it is not a run log; the studio left it untouched. Point "
            "STUDIO_DB at a run log, or move this file away and the studio starts a new one there."
        )


def writable(path: Path) -> bool:
    """Whether this process may write the run log at `path` (and its folder, where SQLite keeps its -wal
    and -shm files); False for a read-only STUDIO_HOME or file system."""
    folder = os.access(path.parent, os.W_OK)
    return folder and (not path.exists() or os.access(path, os.W_OK))


def connect(path: Path, timeout: float, read_only: bool) -> sqlite3.Connection:
    """A connection to the run log that waits up to `timeout` s for a lock; read-only ones cannot write."""
    if not read_only:
        conn = sqlite3.connect(path, timeout=timeout)
        conn.execute(f"PRAGMA busy_timeout={int(timeout * 1000)}")
        conn.execute("PRAGMA synchronous=NORMAL")
        return conn
    uri = f"file:{quote(str(path.resolve()))}?mode=ro"
    conn = sqlite3.connect(uri, uri=True, timeout=timeout)
    try:
        conn.execute("select count(*) from sqlite_master").fetchone()
    except sqlite3.OperationalError:  # a WAL database whose index cannot be created in a read-only folder
        conn.close()
        conn = sqlite3.connect(uri.replace("mode=ro", "immutable=1"), uri=True)
    return conn


def check_schema(conn: sqlite3.Connection, path: Path, migration_set: str) -> None:
    """Refuse a SQLite database that another program wrote (it has tables, but not the studio's), before
    anything is written to it."""
    tables = {row[0] for row in conn.execute("select name from sqlite_master where type = 'table'")}
    if not tables:
        return
    ours = (
        "_sqlite_migrations" in tables
        and conn.execute(
            "select count(*) from _sqlite_migrations where migration_set = ?", [migration_set]
        ).fetchone()[0]
    )
    if not ours or not TABLES <= tables:
        shown = ", ".join(sorted(tables)[:6])
        raise RunLogError(
            f"{path} is a SQLite database of another program (its tables: {shown}), not a Diffusion Studio "
            "run log; the studio left it untouched. Point STUDIO_DB at a run log, or move this file away and "
            "the studio starts a new one there."
        )


def sentence(
    path: Path, exc: BaseException, consequence: str, timeout: float, action: str = "written"
) -> str:
    """What a SQLite (or file) failure on the run log means for the user, and what to do.

    Args:
        path: the run log.
        exc: the failure.
        consequence: what it cost, completing "so ..." ("this run is not in the run log").
        timeout: how long a write waited for a lock.
        action: what failed: "written", "read" or "opened".
    """
    text = str(exc).lower()
    if "locked" in text or "busy" in text:
        cause = f"another program (a database browser, a backup, another studio) held it over {timeout:g} s"
        fix = "Close that program or wait for it, then run again."
    elif "full" in text or getattr(exc, "errno", None) == errno.ENOSPC:
        cause, fix = "its disk is full", "Free disk space, or point STUDIO_DB at a file on another disk."
    elif any(word in text for word in ("readonly", "read-only", "unable to open", "permission")):
        cause = f"it is read-only here ({exc})"
        fix = "Make STUDIO_HOME writable, or point STUDIO_DB at a writable file."
    elif any(word in text for word in ("malformed", "not a database", "corrupt")):
        cause = f"it is damaged ({exc})"
        fix = f"Keep a copy, recover what it holds with `sqlite3 {path} .recover` or use a new STUDIO_DB."
    else:
        cause, fix = f"it failed ({exc})", "Check the file and its disk, or point STUDIO_DB elsewhere."
    return f"The run log {path} could not be {action}: {cause}, so {consequence}. {fix}"


def guarded(consequence: str, action: str = "written") -> Callable:
    """Turn SQLite's failures in a method (locked, disk full, read-only, damaged) into a RunLogError whose
    sentence says `consequence` ("this run is not in the run log") and what to do; a write that failed is
    rolled back whole, so the connection never keeps half of it for the next one."""

    def decorate(method):
        @functools.wraps(method)
        def wrapper(self, *args, **kwargs):
            try:
                return method(self, *args, **kwargs)
            except (sqlite3.DatabaseError, OSError) as exc:
                db = getattr(self._local, "db", None)
                if db is not None and db.conn.in_transaction:
                    db.conn.rollback()
                raise RunLogError(sentence(self.path, exc, consequence, self.timeout, action)) from exc

        return wrapper

    return decorate
