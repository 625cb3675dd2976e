"""Devices: which one a user's `--device` means, the host-wide name of a GPU, its memory, how many
judges it holds, and the lock folder.

The one owner of these answers: the judge, its host-wide locks (`sandbox/devicelock.py`), the judge
processes' GPU lock (`executors/judge_host.py`) and the trainers that place models all ask here.
"""

from __future__ import annotations

import ctypes
import os
import re
import tempfile
import threading
from pathlib import Path

from drkernel.errors import ConfigError

__all__ = ["JUDGE_CARD_BYTES", "card_memory", "card_memory_bytes", "card_state", "gpu_key", "judges_that_fit",
           "lock_dir", "is_device_name", "resolve_device"]

# Of a GPU's memory, what one judge may need at 2048^2: its reference with a sealed span (8-9 GiB), its
# candidate, its comparison child and its warm spares. Judge processes on one H100 80GB judged every honest
# kernel with four, and ran the card out of memory with six and eight (runs BO-BP, docs/service.md).
JUDGE_CARD_BYTES = 18 << 30


def is_device_name(device: str) -> bool:
    """Whether `device` is spelled as drkernel takes one: cpu, cuda or cuda:N."""
    return device in ("cpu", "cuda") or (device.startswith("cuda:") and device[5:].isdigit())


def resolve_device(device: str | None) -> str:
    """None -> cuda:0 when a GPU is present, else cpu. Validates the spelling.

    GPUs are counted by torch.cuda.device_count(), which asks NVML first: the judge's process never
    starts the CUDA driver (its sandboxes and comparison child hold its device contexts), and
    torch.cuda.is_available()'s cuInit took 0.2 s of a single `drkernel eval` on the H200 (run AO)."""
    if device == "cpu":
        return device
    if device is not None and not is_device_name(device):
        raise ConfigError(f"unknown device {device!r}: expected 'cpu', 'cuda' or 'cuda:N'")
    import torch

    count = torch.cuda.device_count()
    if device is None:
        return "cuda:0" if count > 0 else "cpu"
    if count == 0:
        raise ConfigError(f"device {device!r} requested but no CUDA GPU is available: ask for 'cpu' instead")
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


class _Memory(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]


_nvml_lock = threading.Lock()
_nvml: ctypes.CDLL | None = None
_nvml_failed = False


def _nvml_library() -> ctypes.CDLL | None:
    """NVML, the driver's management library, loaded once with ctypes (no CUDA context, no package);
    None where it cannot be (no driver: the CPU, CI)."""
    global _nvml, _nvml_failed
    with _nvml_lock:
        if _nvml is None and not _nvml_failed:
            try:
                lib = ctypes.CDLL("libnvidia-ml.so.1")
                if lib.nvmlInit_v2() != 0:
                    raise OSError("nvmlInit_v2 failed")
                _nvml = lib
            except (OSError, AttributeError):
                _nvml_failed = True
        return _nvml


def card_memory(card: str) -> tuple[int, int] | None:
    """(free, total) bytes of the card `card` names, as the driver sees it: its UUID ("GPU-...", as NVML
    writes it), its PCI bus id ("0000:19:00.0") or its physical index ("3"); None where NVML cannot say.
    The one reader of a card's memory: the executor's judges-per-GPU warning and the judge's witness of
    who ran a card short (sandbox/cardmem.py) both ask here."""
    found = _card_handle(card)
    if found is None:
        return None
    lib, handle = found
    memory = _Memory()
    if lib.nvmlDeviceGetMemoryInfo(handle, ctypes.byref(memory)) != 0:
        return None
    return int(memory.free), int(memory.total)


def _card_handle(card: str) -> tuple[ctypes.CDLL, ctypes.c_void_p] | None:
    """NVML and its handle of the card `card` names (as card_memory takes it); None where NVML cannot say."""
    lib = _nvml_library() if card else None
    if lib is None:
        return None
    handle, key = ctypes.c_void_p(), card.encode()
    if card.startswith(("GPU-", "MIG-")):
        found = lib.nvmlDeviceGetHandleByUUID(key, ctypes.byref(handle))
    elif card.isdigit():
        found = lib.nvmlDeviceGetHandleByIndex_v2(ctypes.c_uint(int(card)), ctypes.byref(handle))
    else:
        found = lib.nvmlDeviceGetHandleByPciBusId_v2(key, ctypes.byref(handle))
    return (lib, handle) if found == 0 else None


_NVML_CLOCK_SM, _NVML_CLOCK_MEM = 1, 2


def card_state(card: str) -> tuple[int, int, float, int] | None:
    """What the card `card` runs at now, as NVML reads it: (SM clock MHz, memory clock MHz, power W,
    memory used bytes); None where NVML cannot say. For benchmarks that look for what slows a timed
    window (bench/judge_speed.py --trace): a clock that dips, a card at its power limit, another
    process's allocations and frees."""
    found = _card_handle(card)
    if found is None:
        return None
    lib, handle = found
    sm, mem, power, memory = ctypes.c_uint(), ctypes.c_uint(), ctypes.c_uint(), _Memory()
    if (lib.nvmlDeviceGetClockInfo(handle, _NVML_CLOCK_SM, ctypes.byref(sm)) != 0
            or lib.nvmlDeviceGetClockInfo(handle, _NVML_CLOCK_MEM, ctypes.byref(mem)) != 0
            or lib.nvmlDeviceGetMemoryInfo(handle, ctypes.byref(memory)) != 0):
        return None
    read = lib.nvmlDeviceGetPowerUsage(handle, ctypes.byref(power)) == 0  # milliwatts; some cards say none
    watts = power.value / 1000.0 if read else float("nan")
    return int(sm.value), int(mem.value), watts, int(memory.used)


def card_memory_bytes(device: str) -> int | None:
    """The memory of the physical GPU behind `device` (cuda:N, through CUDA_VISIBLE_DEVICES as `gpu_key`
    resolves it); None on the CPU or where the driver cannot say."""
    key = gpu_key(device)
    memory = card_memory(key.removeprefix("gpu-")) if key is not None else None
    return memory[1] if memory is not None else None


def judges_that_fit(card_bytes: int) -> int:
    """How many judges a GPU of `card_bytes` holds at 2048^2 (JUDGE_CARD_BYTES each; at least one).

    >>> judges_that_fit(81_559 << 20), judges_that_fit(143_771 << 20)
    (4, 7)
    """
    return max(1, card_bytes // JUDGE_CARD_BYTES)
