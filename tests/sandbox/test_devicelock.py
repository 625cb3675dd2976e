"""One timing window per GPU, host-wide: the lock is exclusive across processes, keyed by the
physical GPU, and a no-op on the CPU."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from drkernel.device import gpu_key
from drkernel.sandbox.devicelock import counting_waits, gpu_work, timing_lock


def test_gpu_key_names_the_physical_gpu() -> None:
    assert gpu_key("cpu") is None
    assert gpu_key("cuda:1", visible="3,5") == "gpu-5"
    assert gpu_key("cuda", visible="GPU-ab/c") == "gpu-GPU-ab_c"
    assert gpu_key("cuda:2", visible="") == "gpu-2"


def _hold_elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seconds: float) -> subprocess.Popen[str]:
    """Another process that holds GPU 7's timing lock (its files in tmp_path) for `seconds` from now."""
    monkeypatch.setenv("DRKERNEL_LOCK_DIR", str(tmp_path))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "7")
    return _holder("timing", seconds)


def test_the_timing_lock_is_exclusive_across_processes(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    proc = _hold_elsewhere(tmp_path, monkeypatch, 1.5)
    t0 = time.monotonic()
    with timing_lock("cuda:0"):  # waits for the other process to let go
        waited = time.monotonic() - t0
    proc.wait(timeout=10)
    assert waited > 0.5
    assert (tmp_path / "gpu-7.timing.lock").exists()
    with timing_lock("cpu"):  # no file, no wait
        pass


_HOLD = ("import sys, time\nfrom drkernel.sandbox.devicelock import gpu_work, timing_lock\n"
         "lock = timing_lock if sys.argv[1] == 'timing' else gpu_work\n"
         "with lock('cuda:0'):\n    print('held', flush=True)\n    time.sleep(float(sys.argv[2]))\n")


def _holder(kind: str, seconds: float) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", _HOLD, kind, str(seconds)], stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def test_shared_gpu_work_runs_side_by_side_but_waits_for_a_timing_window(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from drkernel.sandbox.devicelock import gpu_work

    monkeypatch.setenv("DRKERNEL_LOCK_DIR", str(tmp_path))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    other = _holder("shared", 1.0)
    t0 = time.monotonic()
    with gpu_work("cuda:0"):  # two shared holders at once: no wait
        assert time.monotonic() - t0 < 0.5
    t0 = time.monotonic()
    with timing_lock("cuda:0"):  # the timing window waits for the shared holder to finish
        assert time.monotonic() - t0 > 0.5
    other.wait(timeout=10)
    timing = _holder("timing", 1.0)
    t0 = time.monotonic()
    with gpu_work("cuda:0"):  # and shared work waits for the timing window
        assert time.monotonic() - t0 > 0.5
    timing.wait(timeout=10)


def test_a_waiting_timing_window_keeps_new_shared_work_out(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Writer preference: while a timing window waits for one shared holder, a second shared holder
    that arrives later waits behind the window, not beside the first holder."""
    from drkernel.sandbox.devicelock import gpu_work

    monkeypatch.setenv("DRKERNEL_LOCK_DIR", str(tmp_path))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4")
    first = _holder("shared", 1.5)
    window = subprocess.Popen([sys.executable, "-c", _HOLD, "timing", "1.0"], stdout=subprocess.PIPE,
                              text=True)
    time.sleep(0.5)  # the window is now waiting for `first`, holding the gate
    t0 = time.monotonic()
    with gpu_work("cuda:0"):  # gets in only after `first` (~1 s more) and the window (1 s)
        waited = time.monotonic() - t0
    assert window.stdout is not None and window.stdout.readline().strip() == "held"
    first.wait(timeout=10)
    window.wait(timeout=10)
    assert waited > 1.5


def test_the_thread_holding_the_timing_lock_passes_through_shared_work(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from drkernel.sandbox.devicelock import gpu_work

    monkeypatch.setenv("DRKERNEL_LOCK_DIR", str(tmp_path))
    with timing_lock("cuda:0"), gpu_work("cuda:0"):
        pass
    with gpu_work("cpu"):
        pass


def test_waits_and_exclusive_holds_are_counted_per_thread(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    proc = _hold_elsewhere(tmp_path, monkeypatch, 1.0)
    with counting_waits() as waits:
        with gpu_work("cuda:0", "checksums"):  # waits for the other process's window
            time.sleep(0.2)
        with timing_lock("cuda:0", "timed"):
            time.sleep(0.3)
        with timing_lock("cpu"):  # no lock: nothing counted
            time.sleep(0.8)
    proc.wait(timeout=10)
    assert waits["wait_shared"] > 0.5 and waits["wait_exclusive"] < 0.2
    assert 0.3 <= waits["held_exclusive"] < 1.0
    assert 0.2 <= waits["held_checksums"] < 0.8 and waits["held_timed"] == waits["held_exclusive"]
    with timing_lock("cuda:0"):  # outside the block: the counters stay as they were
        pass
    assert 0.3 <= waits["held_exclusive"] < 1.0


_LEASE = ("import sys, time\nfrom drkernel.sandbox.devicelock import memory_lease\n"
          "with memory_lease('gpu-9', int(sys.argv[1]), int(sys.argv[2])):\n"
          "    print('held', flush=True)\n    time.sleep(float(sys.argv[3]))\n")


def _leaseholder(nbytes: int, slots: int, seconds: float) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", _LEASE, str(nbytes), str(slots), str(seconds)],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def test_the_cards_memory_budget_makes_a_span_wait_for_room_across_processes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run BO: six judges' spans at once filled an H100. Leases of the card's span budget (here 4
    slots) run side by side while they fit, and one that does not fit waits for a holder to end."""
    from drkernel.sandbox.devicelock import MEMORY_UNIT, memory_lease

    monkeypatch.setenv("DRKERNEL_LOCK_DIR", str(tmp_path))
    other = _leaseholder(3 * MEMORY_UNIT, 4, 1.5)  # 3 of the 4 slots, for 1.5 s
    with memory_lease("gpu-9", MEMORY_UNIT, 4) as waited:  # the fourth: no wait
        assert waited < 0.5
    t0 = time.monotonic()
    with counting_waits() as waits, memory_lease("gpu-9", 2 * MEMORY_UNIT, 4) as waited:
        assert time.monotonic() - t0 > 0.8  # waited for the other process's three
    other.wait(timeout=10)
    assert waited > 0.8 and waits["wait_memory"] == pytest.approx(waited)


def test_a_dead_holder_gives_its_share_back_and_an_oversized_span_takes_the_whole_budget(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from drkernel.sandbox.devicelock import MEMORY_UNIT, memory_lease

    monkeypatch.setenv("DRKERNEL_LOCK_DIR", str(tmp_path))
    other = _leaseholder(4 * MEMORY_UNIT, 4, 60)
    other.kill()  # a judge that crashed holding its lease
    other.wait(timeout=10)
    with memory_lease("gpu-9", 100 * MEMORY_UNIT, 4) as waited:  # larger than the budget: all of it
        assert waited < 0.5
        with memory_lease("gpu-9", 1, 4, timeout_s=0.3) as second:  # nothing left: waits, then runs
            assert second >= 0.3


def test_the_cards_budget_is_nothing_on_the_cpu_or_an_unknown_card() -> None:
    from drkernel.sandbox.devicelock import card_memory

    with card_memory("cpu", 1 << 40, 1 << 40) as waited:
        assert waited == 0.0
    with card_memory("cuda:0", 1 << 30, 0) as waited:
        assert waited == 0.0


def test_a_waiting_lease_keeps_the_slots_it_has_and_asks_less_often(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A lease that waits holds what it gathered: it opens no slot it holds again, and it polls the
    others at a falling rate (a span lasts about a second; 200 polls a second over 160 slot files
    was the judge's own load)."""
    from drkernel.sandbox import devicelock
    from drkernel.sandbox.devicelock import MEMORY_UNIT, memory_lease

    monkeypatch.setenv("DRKERNEL_LOCK_DIR", str(tmp_path))
    other = _leaseholder(3 * MEMORY_UNIT, 4, 1.0)  # slots 0-2 for a second
    opened: list[str] = []
    real_open = devicelock._open

    def counting(key: str, kind: str) -> int:
        opened.append(kind)
        return real_open(key, kind)

    monkeypatch.setattr(devicelock, "_open", counting)
    with memory_lease("gpu-9", 2 * MEMORY_UNIT, 4) as waited:  # slot 3 at once, then one of 0-2
        assert waited > 0.5
    other.wait(timeout=10)
    assert opened.count("mem3") == 1, "the slot held while waiting was opened again"
    polls = opened.count("mem0")
    assert 2 <= polls <= 20, f"{polls} polls over a second's wait"
