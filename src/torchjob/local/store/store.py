"""The embedded job store: jobs, replica attempts and events in SQLite under TORCHJOB_HOME.

Written by one supervisor per job, read by any `torchjob` command in any shell (WAL mode).
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torchjob.api.model import JobStatus, TorchJob
from torchjob.api.status import MetricHistory
from torchjob.local.store.files import private_dir, private_file, tighten_file
from torchjob.local.supervisor import pids

SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
  name TEXT PRIMARY KEY,
  uid TEXT NOT NULL,
  job TEXT NOT NULL,          -- the TorchJob without status, JSON
  status TEXT NOT NULL,       -- JobStatus, JSON
  options TEXT NOT NULL,      -- local run options, JSON
  dir TEXT NOT NULL,          -- logs and volumes
  created REAL NOT NULL,
  supervisor_pid INTEGER,
  supervisor_start INTEGER,   -- when it started (clock ticks since boot): with the pid, its identity
  deleting INTEGER NOT NULL DEFAULT 0,
  history TEXT                -- status.progress.history, JSON: apart, so that `list` never reads it
);
CREATE TABLE IF NOT EXISTS attempts (
  job TEXT NOT NULL,
  replica TEXT NOT NULL,
  attempt INTEGER NOT NULL,
  pid INTEGER,
  started REAL,
  ended REAL,
  exit_code INTEGER,
  reason TEXT,
  log TEXT,
  current INTEGER NOT NULL DEFAULT 1,
  PRIMARY KEY (job, replica, attempt)
);
CREATE TABLE IF NOT EXISTS events (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  job TEXT NOT NULL,
  time REAL NOT NULL,
  type TEXT NOT NULL,
  reason TEXT NOT NULL,
  message TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS events_job ON events (job);
"""


def home() -> Path:
    """State directory: $TORCHJOB_HOME, else ~/.torchjob."""
    env = os.environ.get("TORCHJOB_HOME")
    return Path(env).expanduser() if env else Path.home() / ".torchjob"


@dataclass
class JobRecord:
    name: str
    uid: str
    job: TorchJob
    status: JobStatus
    options: dict[str, Any]
    dir: Path
    created: float
    supervisor_pid: int | None
    deleting: bool
    supervisor_start: int | None = None  # torchjob.local.supervisor.pids.started: with the pid, its identity


@dataclass
class AttemptRecord:
    job: str
    replica: str
    attempt: int
    pid: int | None
    started: float | None
    ended: float | None
    exit_code: int | None
    reason: str | None
    log: str | None
    current: bool


@dataclass
class EventRecord:
    time: float
    type: str
    reason: str
    message: str


class Store:
    def __init__(self, root: Path | None = None) -> None:
        self.root = root or home()
        # ~/.torchjob is torchjob's (made 0700, or made so); a TORCHJOB_HOME or root that exists is the user's
        # choice (it may be shared): it is left as it is, and what torchjob makes in it is private
        private_dir(self.root, tighten=self.root == Path.home() / ".torchjob")
        private_dir(self.root / "jobs")
        self.path = self.root / "state.db"
        # Made before SQLite makes it (its -wal and -shm files take its mode); an existing one is never
        # opened here: closing any descriptor of it would drop this process's POSIX locks on it, those
        # of another Store's SQLite connection too ("disk I/O error" seen with two Stores in one process).
        if self.path.exists():
            tighten_file(self.path)
        else:
            private_file(self.path).close()
        self._db = sqlite3.connect(self.path, timeout=30, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(SCHEMA)
        columns = {r[1] for r in self._db.execute("PRAGMA table_info(jobs)")}
        for column, kind in (("history", "TEXT"), ("supervisor_start", "INTEGER")):
            if column not in columns:  # a store made before it
                try:
                    self._db.execute(f"ALTER TABLE jobs ADD COLUMN {column} {kind}")
                except sqlite3.OperationalError:  # another process added it first
                    pass

    def close(self) -> None:
        self._db.close()

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield self._db
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def job_dir(self, name: str) -> Path:
        return self.root / "jobs" / name

    # --- jobs ---

    def create_job(self, job: TorchJob, options: dict[str, Any]) -> JobRecord:
        assert job.metadata.uid
        d = self.job_dir(job.name)
        spec = job.model_copy(update={"status": None})
        status = job.status or JobStatus()
        with self._tx() as db:
            db.execute(
                "INSERT INTO jobs (name, uid, job, status, options, dir, created) VALUES (?,?,?,?,?,?,?)",
                (job.name, job.metadata.uid, spec.model_dump_json(exclude_none=True),
                 status.model_dump_json(), json.dumps(options), str(d), time.time()),
            )
        private_dir(d)
        rec = self.get(job.name)
        assert rec is not None
        return rec

    def get(self, name: str, history: bool = True) -> JobRecord | None:
        """One job; with its metric history in status.progress unless `history` is False."""
        row = self._db.execute(
            "SELECT name, uid, job, status, options, dir, created, supervisor_pid, deleting, supervisor_start, history "
            "FROM jobs "
            "WHERE name=?", (name,),
        ).fetchone()
        if not row:
            return None
        rec = self._record(row[:10])
        if history and row[10] and rec.status.progress is not None:
            rec.status.progress.history = MetricHistory.model_validate_json(row[10])
        return rec

    def all_jobs(self) -> list[JobRecord]:
        rows = self._db.execute(
            "SELECT name, uid, job, status, options, dir, created, supervisor_pid, deleting, supervisor_start "
            "FROM jobs ORDER BY created"
        ).fetchall()
        return [self._record(r) for r in rows]

    @staticmethod
    def _record(row: tuple[Any, ...]) -> JobRecord:
        return JobRecord(
            name=row[0], uid=row[1], job=TorchJob.model_validate_json(row[2]),
            status=JobStatus.model_validate_json(row[3]), options=json.loads(row[4]), dir=Path(row[5]),
            created=row[6], supervisor_pid=row[7], deleting=bool(row[8]), supervisor_start=row[9],
        )

    def set_status(self, name: str, status: JobStatus) -> None:
        """The status; its progress's metric history, when it has one, into its own column."""
        p = status.progress
        if p is None or p.history is None:
            self._db.execute("UPDATE jobs SET status=? WHERE name=?", (status.model_dump_json(), name))
            return
        bare = status.model_copy(update={"progress": p.model_copy(update={"history": None})})
        self._db.execute("UPDATE jobs SET status=?, history=? WHERE name=?",
                         (bare.model_dump_json(), p.history.model_dump_json(), name))

    def set_job(self, job: TorchJob) -> None:
        spec = job.model_copy(update={"status": None})
        self._db.execute("UPDATE jobs SET job=? WHERE name=?", (spec.model_dump_json(exclude_none=True), job.name))

    def set_supervisor(self, name: str, pid: int | None) -> None:
        """The job's supervisor: this process or a child not yet reaped, so that its start time read now
        is its own (a pid alone can name another process minutes later)."""
        start = pids.started(pid) if pid else None
        self._db.execute("UPDATE jobs SET supervisor_pid=?, supervisor_start=? WHERE name=?", (pid, start, name))

    def mark_deleting(self, name: str) -> None:
        self._db.execute("UPDATE jobs SET deleting=1 WHERE name=?", (name,))

    def delete_job(self, name: str) -> None:
        rec = self.get(name)
        with self._tx() as db:
            db.execute("DELETE FROM jobs WHERE name=?", (name,))
            db.execute("DELETE FROM attempts WHERE job=?", (name,))
            db.execute("DELETE FROM events WHERE job=?", (name,))
        if rec is not None:
            shutil.rmtree(rec.dir, ignore_errors=True)

    # --- attempts ---

    def start_attempt(self, job: str, replica: str, attempt: int, pid: int, log: str) -> None:
        self._db.execute(
            "INSERT OR REPLACE INTO attempts (job, replica, attempt, pid, started, log, current) "
            "VALUES (?,?,?,?,?,?,1)",
            (job, replica, attempt, pid, time.time(), log),
        )

    def end_attempt(self, job: str, replica: str, attempt: int, exit_code: int, reason: str | None) -> None:
        self._db.execute(
            "UPDATE attempts SET ended=?, exit_code=?, reason=? WHERE job=? AND replica=? AND attempt=?",
            (time.time(), exit_code, reason, job, replica, attempt),
        )

    def abandon_attempt(self, job: str, replica: str, attempt: int, reason: str, at: float) -> None:
        """An attempt whose runner is gone: it ended (when that was found), with no exit code."""
        self._db.execute(
            "UPDATE attempts SET ended=?, reason=? WHERE job=? AND replica=? AND attempt=? AND ended IS NULL",
            (at, reason, job, replica, attempt),
        )

    def retire_attempt(self, job: str, replica: str, attempt: int) -> None:
        self._db.execute(
            "UPDATE attempts SET current=0 WHERE job=? AND replica=? AND attempt=?", (job, replica, attempt)
        )

    def attempts(self, job: str) -> list[AttemptRecord]:
        rows = self._db.execute(
            "SELECT job, replica, attempt, pid, started, ended, exit_code, reason, log, current FROM attempts "
            "WHERE job=? ORDER BY started, replica, attempt",
            (job,),
        ).fetchall()
        return [
            AttemptRecord(job=r[0], replica=r[1], attempt=r[2], pid=r[3], started=r[4], ended=r[5], exit_code=r[6],
                          reason=r[7], log=r[8], current=bool(r[9]))
            for r in rows
        ]

    # --- events ---

    def add_event(self, job: str, type_: str, reason: str, message: str, at: float | None = None) -> None:
        self._db.execute(
            "INSERT INTO events (job, time, type, reason, message) VALUES (?,?,?,?,?)",
            (job, at or time.time(), type_, reason, message),
        )

    def events(self, job: str) -> list[EventRecord]:
        rows = self._db.execute(
            "SELECT time, type, reason, message FROM events WHERE job=? ORDER BY id", (job,)
        ).fetchall()
        return [EventRecord(*r) for r in rows]
