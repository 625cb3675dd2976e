"""One timing window per GPU at a time, host-wide.

Judges that share a GPU (several per device, or judges of two servers) compile, load and check
correctness side by side; the stages whose numbers depend on having the device to themselves
(timing windows, the profiled window, the peak measurement) take an exclusive flock on a file named
after the physical GPU. The lock ends with its holder, even one that crashed.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path

__all__ = ["device_key", "lock_dir", "timing_lock"]


def lock_dir() -> Path:
    return Path(os.environ.get("DRKERNEL_LOCK_DIR") or Path(tempfile.gettempdir()) / "drkernel-locks")


def device_key(device: str, visible: str | None = None) -> str | None:
    """A host-wide name for the physical GPU behind `device` ("cuda:1" under CUDA_VISIBLE_DEVICES),
    or None for the CPU."""
    if not device.startswith("cuda"):
        return None
    index = int(device.split(":", 1)[1]) if ":" in device else 0
    env = os.environ.get("CUDA_VISIBLE_DEVICES") if visible is None else visible
    ids = [v.strip() for v in env.split(",") if v.strip()] if env else []
    physical = ids[index] if index < len(ids) else str(index)
    return "gpu-" + re.sub(r"[^A-Za-z0-9_.-]", "_", physical)


@contextlib.contextmanager
def timing_lock(device: str) -> Iterator[None]:
    """Hold the device's timing lock for the block; nothing on a CPU device."""
    key = device_key(device)
    if key is None:
        yield
        return
    folder = lock_dir()
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(folder / f"{key}.timing.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the descriptor drops the flock
