"""Reference timings, stored once per (problem, device, reference backend, torch version, trials).

A small SQLite table: a problem is timed once, not once per candidate. Safe across processes
(several workers of one server share the file through SQLite's locking).
"""

from __future__ import annotations

import dataclasses
import json
import os
import sqlite3
import threading
from pathlib import Path
from typing import Any

from drkernel.errors import ConfigError
from drkernel.types import TimingStats

__all__ = ["ReferenceTimingCache"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS reference_timing (
    key TEXT PRIMARY KEY,
    stats TEXT NOT NULL,
    created REAL NOT NULL DEFAULT (strftime('%s','now'))
)
"""


def _open(path: Path) -> sqlite3.Connection:
    """The cache's SQLite file, made the judge's alone: sandboxes run under other uids (SQLite gives its
    -wal and -shm the same mode); its table made if new."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.close(os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600))
    for own in (str(path), f"{path}-wal", f"{path}-shm"):  # files of an older judge may be 0644
        if os.path.exists(own):
            os.chmod(own, 0o600)
    db = sqlite3.connect(str(path), timeout=30, check_same_thread=False)
    try:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute(_SCHEMA)
    except sqlite3.Error:
        db.close()
        raise
    return db


class ReferenceTimingCache:
    """`get`/`put` of TimingStats by key; `path=None` keeps it in memory only."""

    def __init__(self, path: str | Path | None) -> None:
        self._lock = threading.Lock()
        if path is None:
            self._db = sqlite3.connect(":memory:", check_same_thread=False)
            self._db.execute(_SCHEMA)
        else:
            try:
                self._db = _open(Path(path))
            except (OSError, sqlite3.Error) as exc:  # the user's path: one line, not a traceback
                why = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
                raise ConfigError(f"reference timing cache {path}: cannot open it: {why}") from None
        self._db.commit()

    @staticmethod
    def key(problem_hash: str, device_name: str, backend: str, torch_version: str, trials: int, warmup: int,
            preroll_us: float = 0.0, method: str = "") -> str:
        parts: list[object] = [problem_hash, device_name, backend, torch_version, trials, warmup]
        if preroll_us:
            parts.append(preroll_us)
        if method:  # times of another timing method are not comparable: a key of their own
            parts.append(method)
        return json.dumps(parts)  # keys of earlier runs stay valid

    def get(self, key: str) -> TimingStats | None:
        raw = self.get_json(key)
        if not isinstance(raw, dict):
            return None
        names = {f.name for f in dataclasses.fields(TimingStats)}
        return TimingStats(**{k: v for k, v in raw.items() if k in names})

    def put(self, key: str, stats: TimingStats) -> None:
        self.put_json(key, stats.to_dict())

    def get_json(self, key: str) -> Any:
        """Any JSON value stored under `key` (the device's measured peaks, say); None if absent."""
        with self._lock:
            row = self._db.execute("SELECT stats FROM reference_timing WHERE key = ?", (key,)).fetchone()
        return json.loads(row[0]) if row else None

    def put_json(self, key: str, value: Any) -> None:
        with self._lock:
            self._db.execute("INSERT OR REPLACE INTO reference_timing (key, stats) VALUES (?, ?)",
                             (key, json.dumps(value)))
            self._db.commit()

    def close(self) -> None:
        with self._lock:
            self._db.close()
