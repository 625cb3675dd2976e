"""Progress of a training run on stderr: what it is doing now, how far along, and the time left.

On a terminal each phase is a tqdm bar (as TRL and verl show theirs); when stderr is redirected to a
file the same facts are plain lines, flushed, at most one per `interval_s` per phase plus its last, so
that a log file tells where a run stands (and survives kill -9 up to its last line).
"""

from __future__ import annotations

import sys
import threading
import time
from typing import IO, Any

__all__ = ["Bar", "Progress", "format_duration"]


def format_duration(seconds: float) -> str:
    """1h 02m, 3m 05s, 42s."""
    s = max(0, int(round(seconds)))
    if s >= 3600:
        return f"{s // 3600}h {s % 3600 // 60:02d}m"
    if s >= 60:
        return f"{s // 60}m {s % 60:02d}s"
    return f"{s}s"


class Bar:
    """One phase with a known number of units; `update` is safe from several threads."""

    def __init__(self, progress: Progress, desc: str, total: int, unit: str) -> None:
        self._p, self.desc, self.total, self.unit = progress, desc, total, unit
        self.done = 0
        self.postfix = ""
        self._start = time.monotonic()
        self._last_line = 0.0
        self._lock = threading.Lock()
        self._tqdm: Any = None
        if progress.tty:
            from tqdm import tqdm

            self._tqdm = tqdm(total=total, desc=desc, unit=unit, file=progress.stream, leave=False,
                              dynamic_ncols=True)

    def update(self, n: int = 1) -> None:
        with self._lock:
            self.done += n
            if self._tqdm is not None:
                self._tqdm.update(n)
                return
            now = time.monotonic()
            if now - self._last_line >= self._p.interval_s and self.done < self.total:
                self._last_line = now
                self._p.line(self._text(now))

    def set_postfix(self, text: str) -> None:
        with self._lock:
            self.postfix = text
            if self._tqdm is not None:
                self._tqdm.set_postfix_str(text, refresh=False)

    def _text(self, now: float) -> str:
        elapsed = now - self._start
        text = f"{self.desc}: {self.done}/{self.total} {self.unit}, {format_duration(elapsed)}"
        if 0 < self.done < self.total:
            text += f", about {format_duration(elapsed / self.done * (self.total - self.done))} left"
        return text + (f" ({self.postfix})" if self.postfix else "")

    def close(self) -> None:
        with self._lock:
            if self._tqdm is not None:
                self._tqdm.close()
                self._tqdm = None
            if not self._p.tty:
                self._p.line(self._text(time.monotonic()))

    def __enter__(self) -> Bar:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Progress:
    """Where progress goes. `enabled=False` writes nothing (library use, tests)."""

    def __init__(self, stream: IO[str] | None = None, *, enabled: bool = True, interval_s: float = 10.0,
                 tty: bool | None = None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled
        self.interval_s = interval_s
        isatty = getattr(self.stream, "isatty", None)
        self.tty = bool(isatty and isatty()) if tty is None else tty

    def line(self, text: str) -> None:
        """A line of its own, flushed (above any bar on a terminal)."""
        if not self.enabled:
            return
        if self.tty:
            from tqdm import tqdm

            tqdm.write(text, file=self.stream)
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def bar(self, desc: str, total: int, unit: str) -> Bar:
        if not self.enabled:
            return _NullBar(self, desc, total, unit)
        return Bar(self, desc, total, unit)


class _NullBar(Bar):
    def __init__(self, progress: Progress, desc: str, total: int, unit: str) -> None:  # noqa: D107
        self.desc, self.total, self.unit, self.done, self.postfix = desc, total, unit, 0, ""
        self._lock = threading.Lock()

    def update(self, n: int = 1) -> None:
        with self._lock:
            self.done += n

    def set_postfix(self, text: str) -> None:
        self.postfix = text

    def close(self) -> None:
        return None
