"""An Executor wrapper that judges each distinct (reference, kernel, options) once and reuses it.

For runs where the same submission recurs (tiny-model debug runs, kernel-variant experiments). The
cache can persist to a JSONL file so that a resumed run does not judge again. Results keep their
measured timings; nothing is re-timed. Thread-safe; concurrent identical requests are judged once.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from pathlib import Path

from drkernel.executors.base import Executor
from drkernel.types import EvalRequest, EvalResult

__all__ = ["CachingExecutor", "request_key"]

log = logging.getLogger(__name__)


def request_key(request: EvalRequest, scope: str = "") -> str:
    """Stable hash of what decides a verdict (task ids excluded), within `scope` (the judge's)."""
    payload = json.dumps(
        [
            request.reference_code,
            request.kernel_code,
            request.options.to_dict(),
            list(request.shape_variants),
        ],
        sort_keys=True,
    )
    if scope:  # an empty scope keeps the keys of a file written before scopes existed
        payload += "\n" + scope
    return hashlib.sha256(payload.encode()).hexdigest()


class CachingExecutor:
    """`scope` names the judge behind `inner` (its config): a file shared by runs that judged
    through other judges (the fake, another device) never answers for this one."""

    def __init__(self, inner: Executor, path: str | Path | None = None, scope: str = "") -> None:
        self.inner = inner
        self.scope = scope
        self.path = Path(path) if path is not None else None
        self._results: dict[str, EvalResult] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0
        if self.path is not None and self.path.exists():
            self._load(self.path)

    def _load(self, path: Path) -> None:
        for line in path.read_text().splitlines():
            try:
                rec = json.loads(line)
                self._results[rec["key"]] = EvalResult.from_dict(rec["result"])
            except (json.JSONDecodeError, KeyError, TypeError, ValueError):
                log.warning("%s: skipping an unreadable cache line", path)

    def _store(self, key: str, result: EvalResult) -> None:
        self._results[key] = result
        if self.path is not None:
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(json.dumps({"key": key, "result": result.to_dict()}) + "\n")

    def _one(self, request: EvalRequest) -> EvalResult:
        key = request_key(request, self.scope)
        with self._lock:
            key_lock = self._locks.setdefault(key, threading.Lock())
        with key_lock:
            with self._lock:
                cached = self._results.get(key)
            if cached is None:
                result = self.inner.evaluate([request])[0]
                with self._lock:
                    self.misses += 1
                    if result.outcome.value != "infra_error":
                        self._store(key, result)
                return result
        with self._lock:
            self.hits += 1
        copy = EvalResult.from_dict(cached.to_dict())
        copy.task_id = request.task_id
        return copy

    def evaluate(self, requests: list[EvalRequest]) -> list[EvalResult]:
        return [self._one(r) for r in requests]

    def close(self) -> None:
        self.inner.close()
