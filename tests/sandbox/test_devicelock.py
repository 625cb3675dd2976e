"""One timing window per GPU, host-wide: the lock is exclusive across processes, keyed by the
physical GPU, and a no-op on the CPU."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from drkernel.sandbox.devicelock import device_key, timing_lock


def test_device_key_names_the_physical_gpu() -> None:
    assert device_key("cpu") is None
    assert device_key("cuda:1", visible="3,5") == "gpu-5"
    assert device_key("cuda", visible="GPU-ab/c") == "gpu-GPU-ab_c"
    assert device_key("cuda:2", visible="") == "gpu-2"


def test_the_timing_lock_is_exclusive_across_processes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DRKERNEL_LOCK_DIR", str(tmp_path))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "7")
    holder = ("import time\nfrom drkernel.sandbox.devicelock import timing_lock\n"
              "with timing_lock('cuda:0'):\n    print('held', flush=True)\n    time.sleep(1.5)\n")
    proc = subprocess.Popen([sys.executable, "-c", holder], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    t0 = time.monotonic()
    with timing_lock("cuda:0"):  # waits for the other process to let go
        waited = time.monotonic() - t0
    proc.wait(timeout=10)
    assert waited > 0.5
    assert (tmp_path / "gpu-7.timing.lock").exists()
    with timing_lock("cpu"):  # no file, no wait
        pass
