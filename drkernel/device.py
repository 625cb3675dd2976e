"""Devices: which one a user's `--device` means, the host-wide name of a GPU, its memory, how many
judges it holds, and the lock folder.

The one owner of these answers: the judge, its host-wide locks (`sandbox/devicelock.py`), the judge
processes' GPU lock (`executors/judge_host.py`) and the trainers that place models all ask here.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from pathlib import Path

from drkernel.errors import ConfigError

__all__ = ["JUDGE_CARD_BYTES", "card_memory_bytes", "gpu_key", "judges_that_fit", "lock_dir",
           "resolve_device"]

# Of a GPU's memory, what one judge may need at 2048^2: its reference with a sealed span (8-9 GiB), its
# candidate, its comparison child and its warm spares. Judge processes on one H100 80GB judged every honest
# kernel with four, and ran the card out of memory with six and eight (runs BO-BP, docs/service.md).
JUDGE_CARD_BYTES = 18 << 30


def resolve_device(device: str | None) -> str:
    """None -> cuda:0 when a GPU is present, else cpu. Validates the spelling.

    GPUs are counted by torch.cuda.device_count(), which asks NVML first: the judge's process never
    starts the CUDA driver (its sandboxes and comparison child hold its device contexts), and
    torch.cuda.is_available()'s cuInit took 0.2 s of a single `drkernel eval` on the H200 (run AO)."""
    if device == "cpu":
        return device
    if device is not None and device != "cuda" and not (device.startswith("cuda:") and device[5:].isdigit()):
        raise ConfigError(f"unknown device {device!r}: expected 'cpu', 'cuda' or 'cuda:N'")
    import torch

    count = torch.cuda.device_count()
    if device is None:
        return "cuda:0" if count > 0 else "cpu"
    if count == 0:
        raise ConfigError(f"device {device!r} requested but no CUDA GPU is available (use --device cpu)")
    index = int(device.split(":", 1)[1]) if ":" in device else 0
    if index >= count:
        raise ConfigError(f"device {device!r}: only {count} GPU(s) present")
    return f"cuda:{index}"


def gpu_key(device: str, visible: str | None = None) -> str | None:
    """The host-wide name of the physical GPU behind `device`, or None for the CPU.

    `cuda:N` is resolved through CUDA_VISIBLE_DEVICES (or `visible`) to the physical index or UUID, so
    two processes that see the GPUs differently still agree on the name of one GPU."""
    if not device.startswith("cuda"):
        return None
    index = device.partition(":")[2] or "0"
    env = os.environ.get("CUDA_VISIBLE_DEVICES") if visible is None else visible
    ids = [v.strip() for v in env.split(",") if v.strip()] if env else []
    physical = ids[int(index)] if index.isdigit() and int(index) < len(ids) else index
    return "gpu-" + re.sub(r"[^A-Za-z0-9_.-]", "_", physical)


def lock_dir() -> Path:
    """The host-wide folder of the device locks (DRKERNEL_LOCK_DIR, else the temporary folder's)."""
    return Path(os.environ.get("DRKERNEL_LOCK_DIR") or Path(tempfile.gettempdir()) / "drkernel-locks")


def card_memory_bytes(device: str) -> int | None:
    """The memory of the physical GPU behind `device` (cuda:N), as nvidia-smi reads it from the driver
    (no CUDA context in this process); None on the CPU or where nvidia-smi cannot say."""
    key = gpu_key(device)
    if key is None:
        return None
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits",
                              "-i", key.removeprefix("gpu-")], capture_output=True, text=True, timeout=10)
        return int(float(out.stdout.split()[0]) * (1 << 20)) if out.returncode == 0 else None
    except (OSError, ValueError, IndexError, subprocess.SubprocessError):
        return None


def judges_that_fit(card_bytes: int) -> int:
    """How many judges a GPU of `card_bytes` holds at 2048^2 (JUDGE_CARD_BYTES each; at least one).

    >>> judges_that_fit(81_559 << 20), judges_that_fit(143_771 << 20)
    (4, 7)
    """
    return max(1, card_bytes // JUDGE_CARD_BYTES)
