"""Files replaced whole: new text -> a file that every reader sees either as it was or as written;
and the lock file that lets one writer at a time replace a shared one.

Input: a path and its text; output: the file replaced by one rename, its data on disk first. The
writer of the package's files that must be whole or old (run configs, a resumed run's metrics, the
`latest` pointer, the survey, the baseline store, the reports and their plot, verl's parquet); a
failure at any point leaves the old file, or none, and no temporary file beside it. `held_lock` /
`hold_lock` is the one file lock of the package outside the GPU's (the survey, the baseline store,
serve's task store).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
from collections.abc import Callable, Iterator
from pathlib import Path

from drkernel.errors import ConfigError

__all__ = ["held_lock", "hold_lock", "write_file_atomically", "write_text_atomically"]


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
    def write(tmp: Path) -> None:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)

    write_file_atomically(path, write)


def write_file_atomically(path: str | Path, write: Callable[[Path], None]) -> None:
    """As write_text_atomically, for a writer that takes a path (matplotlib's `savefig`): `write(tmp)`
    fills a temporary file of its own beside `path`, which is then synced and renamed over `path`; a
    failure at any point leaves the old file and no temporary one."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    # O_EXCL: a name of its own; 0o666 less the umask, the mode write_text gives a new file
    os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
    try:
        write(tmp)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def hold_lock(path: str | Path, *, wait: bool, busy: str | None = None, follow: bool = False) -> int:
    """The exclusive flock of the file at `path`, held until the returned descriptor is closed (a crash or
    kill -9 closes it): made when missing, never removed, never followed through a symlink unless
    `follow` (a user's own file, such as serve's task store). `wait` and `busy` as in held_lock."""
    flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    fd = os.open(path, flags, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise ConfigError(busy or f"{path}: another process holds it") from None
    except BaseException:
        os.close(fd)
        raise
    return fd


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
    fd = hold_lock(path, wait=wait, busy=busy)
    try:
        yield
    finally:
        os.close(fd)  # lets go of the lock
