"""Files replaced whole: new text -> a file that every reader sees either as it was or as written;
and the lock file that lets one writer at a time replace a shared one.

Input: a path and its text; output: the file replaced by one rename, its data on disk first. The
writer of the package's files that must be whole or old (run configs, a resumed run's metrics, the
`latest` pointer, the survey, the baseline store); a failure at any point leaves the old file, or none,
and no temporary file beside it. `held_lock` is the one lock of those writers (the survey, the store).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
from collections.abc import Iterator
from pathlib import Path

from drkernel.errors import ConfigError

__all__ = ["held_lock", "write_text_atomically"]


def write_text_atomically(path: str | Path, text: str) -> None:
    """Write `text` (UTF-8) to `path` through a temporary file of its own in the same folder, flushed
    and synced, then renamed over `path`: a crash, a kill or an error mid-write leaves the old file
    whole, and two writers never share a temporary file (the last rename wins).

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     write_text_atomically(Path(d, "a.json"), "{}\\n")
    ...     sorted(os.listdir(d)), Path(d, "a.json").read_text()
    (['a.json'], '{}\\n')
    """
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    # O_EXCL: a name of its own; 0o666 less the umask, the mode write_text gives a new file
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with open(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def held_lock(path: str | Path, *, wait: bool, busy: str | None = None) -> Iterator[None]:
    """Hold the exclusive flock of the lock file at `path` for the block: made when missing (the mode
    write_text gives), never followed through a symlink, never removed. `wait`: until another holder
    lets go; else one holding it now is `ConfigError(busy)` (by default, the path and "another process
    holds it"). An OSError (no folder, no right, a symlink) is raised as it is.

    The file stays: removing it on leaving let a process that had opened it just before lock the
    removed file while a third made a new one and locked that, two holders at once.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     with held_lock(Path(d, ".a.lock"), wait=False, busy="a.json: another writer has it"):
    ...         with held_lock(Path(d, ".a.lock"), wait=False, busy="a.json: another writer has it"):
    ...             pass
    Traceback (most recent call last):
    drkernel.errors.ConfigError: a.json: another writer has it
    """
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ConfigError(busy or f"{path}: another process holds it") from None
        yield
    finally:
        os.close(fd)  # lets go of the lock
