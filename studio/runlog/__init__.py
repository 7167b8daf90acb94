"""The run log: SQLite through sqlite-utils (only this module and its schema, studio.runlog.migrations,
import it).

A run is written as `running` before it starts and updated to `ok`, `failed` or
`cancelled` after, so a crash leaves a trace; `mark_interrupted()` turns leftovers
into `interrupted` at start-up. Comparisons, ladders and sweeps are rows of
`groups`. One column per technique (`opt_<name>`, the names given by the caller: the run log knows no
registry) makes filtering easy.

A failure never costs what is already logged: a write that fails (locked, disk full, read-only) is rolled
back whole and raises `RunLogError` with a sentence; a run's results that could not be written wait in memory
and are written with the next write (`finish_run`). A file that is not the studio's run log is refused
untouched (`studio.runlog.safety`).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import socket
import sqlite3
import threading
from pathlib import Path
from typing import Any

import psutil
from sqlite_utils import Database
from sqlite_utils.db import NotFoundError

from studio import checks
from studio.errors import RunLogError, ValidationError
from studio.runlog import safety
from studio.runlog.migrations import migrations
from studio.runlog.safety import DEFERRED, UNRECORDED, guarded

log = logging.getLogger(__name__)

JSON_COLUMNS = ("requested", "applied", "hardware", "latency_all", "warmup_seconds", "step_seconds")
JSON_COLUMNS += ("fidelity", "versions", "stats", "settings", "image_paths", "memory_added_all", "profile")
JSON_COLUMNS += ("loras",)
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
    """A row with its JSON columns parsed (size and nesting checked: a database edited by hand may hold
    anything)."""
    for key in JSON_COLUMNS:
        if isinstance(row.get(key), str):
            fix = "The database was edited outside the studio; restore it from a copy."
            row[key] = checks.parse_json(
                f"The {key} of row {row.get('id')} of the run log", row[key], fix=fix
            )
    return row


ORPHAN_GROUPS = "delete from groups where id not in (select group_id from runs where group_id is not null)"


class RunLog:
    """A run log at `path`; safe to use from several threads (one connection per thread).

    Args:
        path: the SQLite file (created with its folder when missing). A file that is not a run log is refused
            with a `RunLogError` and left untouched.
        techniques: the technique names that get an `opt_<name>` column (a run's `requested` ticks them).
        timeout: seconds a write waits for a lock another program holds before it fails with a sentence.
        read_only: open without writing (also chosen when the file or its folder is read-only): history
            reads, every write fails with a sentence.
    """

    def __init__(
        self,
        path: str | Path,
        techniques: tuple[str, ...] = (),
        timeout: float = safety.DEFAULT_TIMEOUT,
        read_only: bool = False,
    ):
        self.path = Path(path)
        self.techniques = tuple(techniques)
        self.timeout = float(timeout)
        self._local = threading.local()
        self._unwritten: dict[int, dict[str, Any]] = {}  # run id -> results whose write failed
        self._lock = threading.Lock()
        try:
            self._open(read_only)
        except (sqlite3.DatabaseError, OSError, RunLogError) as exc:
            self.close()  # a refused file is left as it was, with no -wal or -shm beside it
            if isinstance(exc, RunLogError):
                raise
            consequence = "nothing was written to it"
            raise RunLogError(safety.sentence(self.path, exc, consequence, self.timeout, "opened")) from exc

    def _open(self, read_only: bool) -> None:
        """Check the file, connect, and bring the schema up to date (a writable run log only)."""
        safety.check_file(self.path)
        if not read_only and not self.path.exists():
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self.read_only = read_only or not safety.writable(self.path)
        if self.read_only and not self.path.exists():
            raise RunLogError(
                f"The run log {self.path} cannot be created: its folder is read-only. Make STUDIO_HOME "
                "writable, or point STUDIO_DB at a writable file."
            )
        db = self.db
        safety.check_schema(db.conn, self.path, migrations.name)
        if self.read_only:
            log.warning("the run log %s is read-only here: runs are not recorded", self.path)
            return
        db.execute("PRAGMA journal_mode=WAL")
        migrations.apply(db)
        self._ensure_technique_columns(db)

    @property
    def db(self) -> Database:
        """This thread's connection."""
        db = getattr(self._local, "db", None)
        if db is None:
            db = self._local.db = Database(safety.connect(self.path, self.timeout, self.read_only))
        return db

    def _flush(self) -> None:
        """Write the results that waited in memory (`finish_run`); a run no longer in the log is dropped."""
        with self._lock:
            waiting = dict(self._unwritten)
        for run_id, row in waiting.items():
            try:
                self.db["runs"].update(run_id, row)
            except NotFoundError:
                log.warning("run %s left the run log before its results could be written", run_id)
            with self._lock:
                if self._unwritten.get(run_id) is row:
                    del self._unwritten[run_id]

    def _ensure_technique_columns(self, db: Database) -> None:
        columns = set(db["runs"].columns_dict)
        for name in self.techniques:
            if f"opt_{name}" not in columns:
                db["runs"].add_column(f"opt_{name}", int)

    @guarded(UNRECORDED)
    def start_run(self, record: dict[str, Any]) -> int:
        """Insert a run as `running` and return its id."""
        self._flush()
        record = dict(record, status="running", created_at=now(), **_owner())
        for name in self.techniques:
            record[f"opt_{name}"] = int(name in (record.get("requested") or ()))
        return self.db["runs"].insert(_encode(record)).last_pk

    @guarded(DEFERRED)
    def finish_run(self, run_id: int, status: str, **fields: Any) -> None:
        """Set a run's final status and results in one write; when it fails, they wait in memory for the
        next write (the error says so)."""
        if status not in STATUSES:
            raise ValueError(f"unknown status {status!r}")
        with self._lock:
            self._unwritten[run_id] = _encode(dict(fields, status=status, finished_at=now()))
        self._flush()

    @guarded("this comparison is not in the run log")
    def start_group(self, kind: str, **fields: Any) -> int:
        self._flush()
        row = _encode(dict(fields, kind=kind, status="running", created_at=now()))
        return self.db["groups"].insert(row).last_pk

    @guarded("this comparison still shows as running")
    def finish_group(self, group_id: int, status: str = "ok", error: str | None = None) -> None:
        self.db["groups"].update(group_id, {"status": status, "error": error, "finished_at": now()})

    @guarded("the run is not shown", "read")
    def get_run(self, run_id: int) -> dict[str, Any]:
        try:
            return _decode(self.db["runs"].get(run_id))
        except NotFoundError:
            raise ValidationError(f"There is no run {run_id} in the run log.") from None

    @guarded("the history is not shown", "read")
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
        visitor: str | None = None,
        limit: int = 200,
    ) -> list[dict[str, Any]]:
        """Runs, newest first, filtered by any of the arguments (`visitor`: only that visitor's runs)."""
        where, args = [], []
        for column, value in (
            ("model", model),
            ("device", device),
            ("status", status),
            ("group_id", group_id),
            ("visitor", visitor),
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

    @guarded("runs a stopped studio left still show as running")
    def mark_interrupted(self) -> int:
        """Runs left `running` by a process that is gone become `interrupted`; returns how many. Runs that
        another live process (a second studio on the same database) computes are left alone; read-only: 0."""
        if self.read_only:
            return 0
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
            # a sweep whose process is gone: its runs are all over, some interrupted; its finished rows stay
            self.db.execute(
                "update groups set status = 'interrupted', finished_at = ?, error = 'the studio process "
                "running this sweep stopped before it finished; its finished runs are kept' "
                "where status = 'running' and exists (select 1 from runs r where r.group_id = groups.id and "
                "r.status = 'interrupted') and not exists (select 1 from runs r where r.group_id = groups.id "
                "and r.status = 'running')",
                [now()],
            )
        return len(dead)

    def backup(self, destination: str | Path, visitor: str | None = None) -> Path:
        """A consistent copy at `destination` (safe while runs write); `visitor`'s runs alone if given."""
        target = Path(destination)
        target.parent.mkdir(parents=True, exist_ok=True)
        with sqlite3.connect(target) as dst:
            self.db.conn.backup(dst)
        if visitor is not None:
            with dst:
                dst.execute("delete from runs where visitor is null or visitor != ?", [visitor])
                dst.execute(ORPHAN_GROUPS)
            dst.execute("vacuum")
        dst.close()
        return target

    @guarded("nothing was deleted")  # a visitor's wish, or the retention (`studio.engine.retention`)
    def delete_runs(self, *, visitor: str | None = None, ids: list[int] = ()) -> list[dict]:
        """Delete `visitor`'s runs, or the runs `ids`, and the comparisons left without a run: the rows."""
        where, args = ("visitor = ?", [visitor]) if visitor else (f"id in ({','.join('?' * len(ids))})", ids)
        with self._lock, self.db.conn:
            rows = [_decode(r) for r in self.db["runs"].rows_where(where, args)]
            self.db.execute(f"delete from runs where {where}", args)
            self.db.execute(ORPHAN_GROUPS)
        return rows

    def close(self) -> None:
        """Close this thread's connection (a later call opens a new one)."""
        db = getattr(self._local, "db", None)
        if db is not None:
            self._local.db = None
            db.close()
