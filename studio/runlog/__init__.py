"""The run log: SQLite through sqlite-utils (only this module and its schema, studio.runlog.migrations,
import it).

A run is written as `running` before it starts and updated to `ok`, `failed` or
`cancelled` after, so a crash leaves a trace; `mark_interrupted()` turns leftovers
into `interrupted` at start-up. Comparisons, ladders and sweeps are rows of
`groups`. One column per technique (`opt_<name>`, the names given by the caller: the run log knows no
registry) makes filtering easy.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import socket
import sqlite3
import threading
from pathlib import Path
from typing import Any

import psutil
from sqlite_utils import Database
from sqlite_utils.db import NotFoundError

from studio.errors import RunLogError, ValidationError
from studio.runlog.migrations import migrations

JSON_COLUMNS = (
    "requested",
    "applied",
    "hardware",
    "latency_all",
    "warmup_seconds",
    "step_seconds",
    "fidelity",
    "versions",
    "stats",
    "settings",
    "image_paths",
    "memory_added_all",
    "profile",
)
STATUSES = ("running", "ok", "failed", "cancelled", "interrupted")


def _owner() -> dict[str, Any]:
    me = psutil.Process()
    return {"owner_host": socket.gethostname(), "owner_pid": me.pid, "owner_started": me.create_time()}


def _alive(host: str | None, pid: int | None, started: float | None) -> bool:
    """Whether the process that started a run still runs (a process on another host counts as alive:
    it cannot be checked from here)."""
    if pid is None or host is None:
        return False
    if host != socket.gethostname():
        return True
    try:
        return started is None or abs(psutil.Process(pid).create_time() - started) < 1e-3
    except psutil.NoSuchProcess:
        return False


def now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")


def _encode(record: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for key, value in record.items():
        if key in JSON_COLUMNS and value is not None and not isinstance(value, str):
            value = json.dumps(value, default=str)
        out[key] = value
    return out


def _decode(row: dict[str, Any]) -> dict[str, Any]:
    for key in JSON_COLUMNS:
        if isinstance(row.get(key), str):
            row[key] = json.loads(row[key])
    return row


def _writes(method):
    """Turn SQLite's write failures (read-only, disk full, locked) into RunLogError with what to do."""

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except sqlite3.OperationalError as exc:
            raise RunLogError(
                f"The run log {self.path} could not be written ({exc}); free disk space, fix its permissions "
                "or point STUDIO_DB elsewhere."
            ) from exc

    return wrapper


class RunLog:
    """A run log at `path`; safe to use from several threads (one connection per thread).

    Args:
        path: the SQLite file (created with its folder when missing).
        techniques: the technique names that get an `opt_<name>` column (a run's `requested` ticks them).
    """

    def __init__(self, path: str | Path, techniques: tuple[str, ...] = ()):
        self.path = Path(path)
        self.techniques = tuple(techniques)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._local = threading.local()
        db = self.db
        db.execute("PRAGMA journal_mode=WAL")
        migrations.apply(db)
        self._ensure_technique_columns(db)

    @property
    def db(self) -> Database:
        """This thread's connection."""
        db = getattr(self._local, "db", None)
        if db is None:
            conn = sqlite3.connect(self.path, timeout=30)
            conn.execute("PRAGMA busy_timeout=30000")
            conn.execute("PRAGMA synchronous=NORMAL")
            db = self._local.db = Database(conn)
        return db

    def _ensure_technique_columns(self, db: Database) -> None:
        columns = set(db["runs"].columns_dict)
        for name in self.techniques:
            if f"opt_{name}" not in columns:
                db["runs"].add_column(f"opt_{name}", int)

    @_writes
    def start_run(self, record: dict[str, Any]) -> int:
        """Insert a run as `running` and return its id."""
        record = dict(record, status="running", created_at=now(), **_owner())
        for name in self.techniques:
            record[f"opt_{name}"] = int(name in (record.get("requested") or ()))
        return self.db["runs"].insert(_encode(record)).last_pk

    @_writes
    def finish_run(self, run_id: int, status: str, **fields: Any) -> None:
        """Set a run's final status and results."""
        if status not in STATUSES:
            raise ValueError(f"unknown status {status!r}")
        self.db["runs"].update(run_id, _encode(dict(fields, status=status, finished_at=now())))

    @_writes
    def start_group(self, kind: str, **fields: Any) -> int:
        row = _encode(dict(fields, kind=kind, status="running", created_at=now()))
        return self.db["groups"].insert(row).last_pk

    @_writes
    def finish_group(self, group_id: int, status: str = "ok", error: str | None = None) -> None:
        self.db["groups"].update(group_id, {"status": status, "error": error, "finished_at": now()})

    def get_run(self, run_id: int) -> dict[str, Any]:
        try:
            return _decode(self.db["runs"].get(run_id))
        except NotFoundError:
            raise ValidationError(f"There is no run {run_id} in the run log.") from None

    def get_group(self, group_id: int) -> dict[str, Any]:
        return _decode(self.db["groups"].get(group_id))

    def runs(
        self,
        *,
        model: str | None = None,
        device: str | None = None,
        status: str | None = None,
        technique: str | None = None,
        since: str | None = None,
        until: str | None = None,
        group_id: int | None = None,
        limit: int = 200,
    ) -> list[dict[str, Any]]:
        """Runs, newest first, filtered by any of the arguments."""
        where, args = [], []
        for column, value in (
            ("model", model),
            ("device", device),
            ("status", status),
            ("group_id", group_id),
        ):
            if value not in (None, ""):
                where.append(f"{column} = ?")
                args.append(value)
        if technique:
            if f"opt_{technique}" not in self.db["runs"].columns_dict:
                raise ValueError(f"unknown technique {technique!r}")
            where.append(f"opt_{technique} = 1")
        if since:
            where.append("created_at >= ?")
            args.append(since)
        if until:
            where.append("created_at <= ?")
            args.append(until)
        rows = self.db["runs"].rows_where(" and ".join(where) or None, args, order_by="id desc", limit=limit)
        return [_decode(r) for r in rows]

    @_writes
    def mark_interrupted(self) -> int:
        """Runs left `running` by a process that is gone become `interrupted`; returns how many.

        Runs that another live process (a second studio on the same database) is computing are left alone.
        """
        rows = self.db.execute(
            "select id, owner_host, owner_pid, owner_started from runs where status = 'running'"
        )
        dead = [run_id for run_id, host, pid, started in rows.fetchall() if not _alive(host, pid, started)]
        with self.db.conn:
            for run_id in dead:
                self.db.execute(
                    "update runs set status = 'interrupted', finished_at = ?, error = 'the studio process "
                    "computing this run stopped before it finished' where id = ? and status = 'running'",
                    [now(), run_id],
                )
        return len(dead)

    def backup(self, destination: str | Path) -> Path:
        """A consistent copy of the run log at `destination` (SQLite's backup API: safe while runs write)."""
        target = Path(destination)
        target.parent.mkdir(parents=True, exist_ok=True)
        with sqlite3.connect(target) as dst:
            self.db.conn.backup(dst)
        dst.close()
        return target

    def integrity_ok(self) -> bool:
        return self.db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
