"""The embedded task store: SQLite in WAL mode; a task is committed before it is acknowledged.

Input: submissions, state transitions and results from the app and the scheduler; output: task
records that survive kill -9 of the server. States: queued -> running -> done, or cancelled.
A restarted server re-queues what was queued or running (`requeue_interrupted`). The worker
column holds where the task runs or last ran (JSON: worker, host, Ray node, device, pid).
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from typing import Any

from drkernel.errors import ConfigError, DrKernelError
from drkernel.files import hold_lock
from drkernel.types import EvalOutcome, EvalRequest, EvalResult

__all__ = ["ANCHOR_TASK_ID_MAX_CHARS", "TASK_ID_MAX_CHARS", "NewTask", "StoreUnavailable", "TaskConflict",
           "TaskRecord", "TaskStore", "fingerprint", "task_id_error"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS tasks (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    task_id TEXT NOT NULL UNIQUE,
    state TEXT NOT NULL,
    priority TEXT NOT NULL,
    request TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    result TEXT,
    attempts INTEGER NOT NULL DEFAULT 0,
    worker TEXT,
    submitted_at REAL NOT NULL,
    started_at REAL,
    finished_at REAL,
    meta TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX IF NOT EXISTS tasks_state ON tasks(state, seq);
CREATE INDEX IF NOT EXISTS tasks_finished ON tasks(finished_at);
"""

# columns added after the first release: (name, declaration), added to older files on open
_ADDED_COLUMNS = (("dedupe_key", "TEXT"),)
_ADDED_INDEXES = "CREATE INDEX IF NOT EXISTS tasks_dedupe ON tasks(dedupe_key, submitted_at);"

_COLUMNS = "task_id, state, priority, request, result, attempts, worker, submitted_at, " \
           "started_at, finished_at, meta, seq"

FINISHED = ("done", "cancelled")

TASK_ID_MAX_CHARS = 200  # the native API's bound
ANCHOR_TASK_ID_MAX_CHARS = 100  # KernelGYM's (kernelgym-anchor.md §1.2), kept on its routes


def task_id_error(task_id: object, max_chars: int = TASK_ID_MAX_CHARS) -> str | None:
    """Why `task_id` cannot name a task, or None when it can: both APIs' one rule. Printable only: a
    newline or a control character (C0, C1, a line separator) in an id reached the log lines that name
    the task.

    >>> task_id_error("run-7/step 3"), task_id_error("a\\nb")
    (None, 'a string of 1-200 printable characters')
    """
    if isinstance(task_id, str) and 0 < len(task_id) <= max_chars and task_id.isprintable():
        return None
    return f"a string of 1-{max_chars} printable characters"


class StoreUnavailable(DrKernelError):
    """The store could not commit a write (a full disk, a read-only or locked file); nothing of it
    was kept, and the same write may succeed later."""


class TaskConflict(DrKernelError):
    """A task id already names a different request."""

    def __init__(self, message: str, task_id: str | None = None) -> None:
        super().__init__(message)
        self.task_id = task_id


def _differences(old: dict[str, Any], new: dict[str, Any], prefix: str = "") -> list[str]:
    """The keys (options.* one level down) whose values differ between two requests' dicts."""
    out: list[str] = []
    for key in sorted(set(old) | set(new)):
        if key == "task_id" or old.get(key) == new.get(key):
            continue
        a, b = old.get(key), new.get(key)
        if isinstance(a, dict) and isinstance(b, dict) and not prefix:
            out.extend(_differences(a, b, f"{key}."))
        else:
            out.append(prefix + key)
    return out


def fingerprint(request: EvalRequest) -> str:
    payload = request.to_dict() | {"task_id": None}
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


@dataclass(slots=True)
class NewTask:
    request: EvalRequest  # request.task_id is the key
    priority: str = "normal"
    meta: dict[str, Any] = field(default_factory=dict)
    force: bool = False  # re-run even if a finished task has this id
    # set when the client gave no task_id: (key of same code, options and client; window in s).
    # A task with this key submitted within the window is answered instead of a new one.
    dedupe: tuple[str, float] | None = None


@dataclass(slots=True)
class TaskRecord:
    task_id: str
    state: str  # queued | running | done | cancelled
    priority: str
    request_json: str
    result: EvalResult | None
    attempts: int
    worker: str | None
    submitted_at: float
    started_at: float | None
    finished_at: float | None
    meta: dict[str, Any]
    # the row's number: a task forced again under its id is a new row, so a late result of the
    # run it replaced (cancelled, still running) cannot end it
    seq: int = 0

    @property
    def request(self) -> EvalRequest:
        return EvalRequest.from_dict(json.loads(self.request_json))

    @property
    def finished(self) -> bool:
        return self.state in FINISHED

    @property
    def placement(self) -> dict[str, Any] | None:
        """Where the task runs or last ran (worker, host, Ray node, device, pid), if known."""
        if not self.worker:
            return None
        try:
            value = json.loads(self.worker)
        except json.JSONDecodeError:
            return {"worker_id": self.worker}
        return value if isinstance(value, dict) else {"worker_id": self.worker}


def _stored_result(task_id: str, text: str) -> EvalResult:
    """A stored result; one this version cannot read (an outcome of a newer version) is an infra_error
    that says so, as /health and /metrics count it (a failure), where every read of it was a 500."""
    data = json.loads(text)
    try:
        return EvalResult.from_dict(data)
    except (KeyError, TypeError, ValueError) as exc:
        why = f"this server's version cannot read the stored result ({type(exc).__name__}: {exc})"
        return EvalResult.failure(EvalOutcome.INFRA_ERROR, "unreadable_result", why, task_id=task_id)


def _record(row: tuple[Any, ...]) -> TaskRecord:
    task_id, state, priority, request, result, attempts, worker, sub, start, fin, meta, seq = row
    return TaskRecord(
        task_id=task_id, state=state, priority=priority, request_json=request,
        result=_stored_result(task_id, result) if result else None,
        attempts=attempts, worker=worker, submitted_at=sub, started_at=start, finished_at=fin,
        meta=json.loads(meta), seq=seq,
    )


class TaskStore:
    """Thread-safe access to one SQLite file (one connection, one lock; WAL for durability)."""

    def __init__(self, path: str, durable: bool = False, exclusive: bool = False) -> None:
        """`exclusive`: this process serves from the file, and no other may while it is open (a server's
        store; a second server on it re-queued the first one's running tasks and judged them again)."""
        self.path = path
        self._owner = _hold(path) if exclusive and path != ":memory:" else None
        self._lock = threading.Lock()
        try:
            self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=30)
        except BaseException:
            self._release()
            raise
        try:
            self._prepare(durable)
        except BaseException:
            self.close()
            raise

    def _prepare(self, durable: bool) -> None:
        """WAL, the schema and the columns added since the first release; refuses a tasks table of
        another layout."""
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(f"PRAGMA synchronous={'FULL' if durable else 'NORMAL'}")
        self._db.executescript(_SCHEMA)
        have = {row[1] for row in self._db.execute("PRAGMA table_info(tasks)")}
        for name, decl in _ADDED_COLUMNS:
            if name not in have:
                self._db.execute(f"ALTER TABLE tasks ADD COLUMN {name} {decl}")
        self._db.executescript(_ADDED_INDEXES)
        # (cid, name, type, notnull, default, pk) of each column
        columns = self._db.execute("PRAGMA table_info(tasks)").fetchall()
        ours = (*_COLUMNS.split(", "), "fingerprint", *(name for name, _ in _ADDED_COLUMNS))
        missing = [c for c in ours if c not in {col[1] for col in columns}]
        # a column we do not fill that must be filled: every submission failed its INSERT (a 500)
        required = [col[1] for col in columns
                    if col[1] not in ours and col[3] and col[4] is None and not col[5]]
        if missing or required:  # every write would fail (a 503 the clients retry for ever, or a 500)
            why = f"has no column {', '.join(missing)}" if missing else \
                f"needs column {', '.join(required)}, which this version does not fill"
            raise sqlite3.DatabaseError(f"its tasks table {why}: written by another program or version")

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            try:
                self._db.execute("BEGIN IMMEDIATE")
                try:
                    yield self._db
                except BaseException:
                    self._db.execute("ROLLBACK")
                    raise
                self._db.execute("COMMIT")
            except sqlite3.OperationalError as exc:  # a full disk, a read-only or locked file
                if self._db.in_transaction:
                    with suppress(sqlite3.Error):
                        self._db.execute("ROLLBACK")
                raise StoreUnavailable(f"the task store {self.path} cannot be written: {exc}") from exc

    def submit(self, tasks: list[NewTask]) -> list[tuple[TaskRecord, bool]]:
        """Insert tasks atomically; (record, created) each. Same id + same request: attached."""
        now = time.time()
        out: list[tuple[TaskRecord, bool]] = []
        with self._tx() as db:
            for task in tasks:
                rid = task.request.task_id
                if rid is None:
                    raise ValueError("a stored task needs a task_id")
                fp = fingerprint(task.request)
                if task.dedupe is not None and not task.force:
                    key, window = task.dedupe
                    row = db.execute(
                        f"SELECT {_COLUMNS} FROM tasks WHERE dedupe_key=? AND submitted_at>=? "
                        "AND state!='cancelled' ORDER BY seq DESC LIMIT 1",
                        (key, now - window)).fetchone()
                    if row is not None:
                        out.append((_record(row), False))
                        continue
                row = db.execute(f"SELECT {_COLUMNS}, fingerprint FROM tasks WHERE task_id=?",
                                 (rid,)).fetchone()
                if row is not None:
                    existing = _record(row[:-1])
                    if row[-1] != fp and not task.force:
                        differ = _differences(json.loads(existing.request_json), task.request.to_dict())
                        raise TaskConflict(
                            f"task_id {rid!r} already names a different request (it differs in "
                            f"{', '.join(differ[:8]) or 'its fields'}; a request sent to the other API "
                            "differs in its default options): choose another task_id, or force it",
                            task_id=rid)
                    if not (task.force and existing.finished):
                        out.append((existing, False))
                        continue
                    db.execute("DELETE FROM tasks WHERE task_id=?", (rid,))
                cur = db.execute(
                    "INSERT INTO tasks (task_id, state, priority, request, fingerprint, "
                    "submitted_at, meta, dedupe_key) VALUES (?, 'queued', ?, ?, ?, ?, ?, ?)",
                    (rid, task.priority, json.dumps(task.request.to_dict()), fp, now,
                     json.dumps(task.meta), task.dedupe[0] if task.dedupe else None),
                )
                out.append((TaskRecord(rid, "queued", task.priority, "", None, 0, None, now,
                                       None, None, task.meta, cur.lastrowid or 0), True))
        return out

    def mark_running(self, task_id: str, worker: str | None = None) -> TaskRecord | None:
        """queued -> running (one more attempt); None if the task is no longer queued."""
        with self._tx() as db:
            cur = db.execute(
                "UPDATE tasks SET state='running', attempts=attempts+1, started_at=?, worker=? "
                "WHERE task_id=? AND state='queued'", (time.time(), worker, task_id))
            if cur.rowcount == 0:
                return None
            row = db.execute(f"SELECT {_COLUMNS} FROM tasks WHERE task_id=?", (task_id,)).fetchone()
        return _record(row)

    def record_attempt(self, task_id: str, placement: dict[str, Any], retry: bool,
                       why: str | None = None) -> bool:
        """A worker took the running task: record where; a retry inside the executor counts as
        one more attempt, and why the previous try failed goes to meta["retries"].
        False when the task is no longer running (cancelled): it should not be run."""
        with self._tx() as db:
            row = db.execute("SELECT meta FROM tasks WHERE task_id=? AND state='running'",
                             (task_id,)).fetchone()
            if row is None:
                return False
            meta = json.loads(row[0])
            if retry:
                meta.setdefault("retries", []).append(
                    {"at": time.time(), "reason": why, "next_worker": placement.get("worker_id")})
            db.execute("UPDATE tasks SET worker=?, attempts=attempts+?, meta=? WHERE task_id=?",
                       (json.dumps(placement, sort_keys=True), 1 if retry else 0,
                        json.dumps(meta), task_id))
        return True

    def finish(self, task_id: str, result: EvalResult, seq: int | None = None) -> bool:
        """running|queued -> done with its result; False if it was cancelled meanwhile, or, given the
        `seq` of the row that was run, if the task was forced again since (a new row)."""
        with self._tx() as db:
            cur = db.execute(
                "UPDATE tasks SET state='done', result=?, finished_at=? "
                "WHERE task_id=? AND state IN ('running', 'queued') AND (? IS NULL OR seq=?)",
                (json.dumps(result.to_dict()), time.time(), task_id, seq, seq))
            return cur.rowcount > 0

    def requeue(self, task_id: str) -> bool:
        """running -> queued when the server stops politely; meta["stopped"] counts these, so that a try
        the server itself interrupted is not taken for a crash the task caused."""
        with self._tx() as db:
            cur = db.execute(
                "UPDATE tasks SET state='queued', meta=json_set(meta, '$.stopped', "
                "COALESCE(json_extract(meta, '$.stopped'), 0) + 1) WHERE task_id=? AND state='running'",
                (task_id,))
            return cur.rowcount > 0

    def cancel(self, task_id: str) -> str | None:
        """Cancel a queued or running task; returns its previous state (None if unknown)."""
        with self._tx() as db:
            row = db.execute("SELECT state FROM tasks WHERE task_id=?", (task_id,)).fetchone()
            if row is None:
                return None
            if row[0] in ("queued", "running"):
                db.execute("UPDATE tasks SET state='cancelled', finished_at=? WHERE task_id=?",
                           (time.time(), task_id))
            return str(row[0])

    def requeue_interrupted(self) -> int:
        """After a crash: running -> queued. Returns how many were re-queued."""
        with self._tx() as db:
            cur = db.execute("UPDATE tasks SET state='queued' WHERE state='running'")
            return cur.rowcount

    def queued(self) -> list[tuple[str, str, float]]:
        """(task_id, priority, submitted_at) of every queued task, oldest first."""
        with self._lock:
            rows = self._db.execute(
                "SELECT task_id, priority, submitted_at FROM tasks WHERE state='queued' ORDER BY seq"
            ).fetchall()
        return [(r[0], r[1], r[2]) for r in rows]

    def get(self, task_id: str) -> TaskRecord | None:
        with self._lock:
            row = self._db.execute(f"SELECT {_COLUMNS} FROM tasks WHERE task_id=?",
                                   (task_id,)).fetchone()
        return _record(row) if row else None

    def get_many(self, task_ids: list[str]) -> dict[str, TaskRecord]:
        out: dict[str, TaskRecord] = {}
        for start in range(0, len(task_ids), 500):
            chunk = task_ids[start:start + 500]
            marks = ",".join("?" * len(chunk))
            with self._lock:
                rows = self._db.execute(
                    f"SELECT {_COLUMNS} FROM tasks WHERE task_id IN ({marks})", chunk).fetchall()
            out.update((r[0], _record(r)) for r in rows)
        return out

    def purge(self, finished_before: float) -> int:
        """Delete finished tasks older than the retention cut-off."""
        with self._tx() as db:
            cur = db.execute("DELETE FROM tasks WHERE state IN ('done', 'cancelled') "
                             "AND finished_at < ?", (finished_before,))
            return cur.rowcount

    def outcome_counts(self) -> dict[str, int]:
        """Finished (done) tasks in the store by outcome: what /health reports after a restart."""
        with self._lock:
            rows = self._db.execute(
                "SELECT json_extract(result, '$.outcome'), COUNT(*) FROM tasks "
                "WHERE state='done' GROUP BY 1").fetchall()
        return {str(outcome): n for outcome, n in rows if outcome}

    def verdict_counts(self) -> dict[tuple[str, str], int]:
        """Finished (done) tasks by (outcome, error kind; "" when none)."""
        with self._lock:
            rows = self._db.execute(
                "SELECT json_extract(result, '$.outcome'), json_extract(result, '$.error.kind'), "
                "COUNT(*) FROM tasks WHERE state='done' GROUP BY 1, 2").fetchall()
        return {(str(outcome), str(kind or "")): n for outcome, kind, n in rows if outcome}

    def counts(self) -> dict[str, int]:
        with self._lock:
            rows = self._db.execute("SELECT state, COUNT(*) FROM tasks GROUP BY state").fetchall()
        return {state: n for state, n in rows}

    def close(self) -> None:
        with self._lock:
            self._db.close()
        self._release()

    def _release(self) -> None:
        if self._owner is not None:
            os.close(self._owner)  # the flock goes with it
            self._owner = None


def _hold(path: str) -> int:
    """An exclusive flock on the store file for as long as its descriptor is open (SQLite's own locks
    are fcntl locks, which flock does not touch; kill -9 releases it). Raises sqlite3.OperationalError
    when another process holds it."""
    try:
        return hold_lock(path, wait=False, follow=True,
                         busy="another process (a drkernel serve?) serves from it: one server per task store")
    except ConfigError as exc:
        raise sqlite3.OperationalError(str(exc)) from None
