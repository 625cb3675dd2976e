"""Files replaced whole: new text -> a file that every reader sees either as it was or as written.

Input: a path and its text; output: the file replaced by one rename, its data on disk first. The
writer of the package's files that must be whole or old (run configs, a resumed run's metrics, the
`latest` pointer, the survey, the baseline store); a failure at any point leaves the old file, or none,
and no temporary file beside it.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path

__all__ = ["write_text_atomically"]


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
