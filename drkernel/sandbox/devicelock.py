"""The device to itself for timing, host-wide: a reader-writer lock per physical GPU.

Judges that share a GPU (several per device, or judges of two servers) compile, load and check
correctness side by side. The stages whose numbers depend on having the device to themselves (the timed
windows, the sealed span's stage, the profiled window, the peak measurement, the reference's timing)
hold the lock exclusively (`timing_lock`); other heavy GPU work of the judges' sandboxes (the
reference's checksums of timed inputs, the launch modes, building the candidate's window) holds it
shared (`gpu_work`), so it never runs inside another judge's timing window. Writers are preferred: a
timing window that waits keeps new shared holders out (they queue on a gate file the writer holds), so a
stream of shared work cannot starve it. The steps that may compile the candidate's kernels (seconds of
CPU: the correctness trials, the held-out shapes) take no lock: a shared holder that compiles would keep
every timing window waiting.

Both are flocks on files named after the GPU: they end with their holder, even one that crashed.
A thread that holds the timing lock passes through `gpu_work` (the same thread must not wait on
itself). `counting_waits` adds up, for one thread's evaluation, the seconds it waited for the lock and
held it exclusively, and per named section (`what`) the seconds it held it either way: where several
judges share a GPU, they show whether the lock bounds the rate, and which sections hold it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
import time
from collections.abc import Iterator

from drkernel.device import gpu_key, lock_dir

__all__ = ["MEMORY_UNIT", "SPAN_SHARE", "candidate_alive", "card_memory", "counting_waits", "gpu_work",
           "no_candidates", "timing_lock"]

_held = threading.local()  # .timing: this thread holds a timing lock; .waits: its counters, or None


def _open(key: str, kind: str) -> int:
    folder = lock_dir()
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    return os.open(folder / f"{key}.{kind}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
                   0o600)


@contextlib.contextmanager
def counting_waits() -> Iterator[dict[str, float]]:
    """Seconds this thread waits for the lock (exclusive, shared) and holds it exclusively in the block;
    and `held_<what>` for each named section it held, either way."""
    waits = {"wait_exclusive": 0.0, "wait_shared": 0.0, "held_exclusive": 0.0}
    outer, _held.waits = getattr(_held, "waits", None), waits
    try:
        yield waits
    finally:
        _held.waits = outer


@contextlib.contextmanager
def timing_lock(device: str, what: str = "") -> Iterator[None]:
    """Hold the device exclusively for the block; nothing on a CPU device. `what`: the section's name
    for counting_waits."""
    with _device_lock(device, exclusive=True, what=what):
        yield


@contextlib.contextmanager
def gpu_work(device: str, what: str = "") -> Iterator[None]:
    """Hold the device shared for the block: it waits for timing windows, and timing windows for it."""
    with _device_lock(device, exclusive=False, what=what):
        yield


# The card's memory for the judges' sealed spans, host-wide (`card_memory`): a span's region, its inputs
# staged and its outputs taken are the largest device memory a judge holds (8-9 GiB a reference at
# 2048^2, 128 calls). Six judges on one 80 GB H100, each spanning at once, filled the card: honest
# kernels came back out-of-memory runtime errors, starved references, even a wrong sealed output
# (run BO). Spans beyond SPAN_SHARE of the card wait for one to end instead.
SPAN_SHARE = 0.5
MEMORY_UNIT = 256 << 20  # one slot file: the budget's grain


@contextlib.contextmanager
def card_memory(device: str, nbytes: int, card_bytes: int, share: float = SPAN_SHARE,
                timeout_s: float = 600.0) -> Iterator[float]:
    """Hold `nbytes` of the judges' budget on the card behind `device` (`share` of its `card_bytes`) for
    the block; yields the seconds it waited. Nothing on a CPU device or with an unknown card size."""
    key = gpu_key(device)
    if key is None or nbytes <= 0 or card_bytes <= 0:
        yield 0.0
        return
    with memory_lease(key, nbytes, max(1, int(card_bytes * share) // MEMORY_UNIT), timeout_s) as waited:
        yield waited


@contextlib.contextmanager
def memory_lease(key: str, nbytes: int, slots: int, timeout_s: float = 600.0,
                 poll_s: float = 0.005) -> Iterator[float]:
    """`nbytes` (in MEMORY_UNIT slots, at most all `slots`) of the budget named `key`, for the block.

    Each slot is a file flocked exclusively by its holder: a holder that dies gives its slots back with
    its descriptors, as the device locks do. One taker at a time holds the gate while it gathers its
    slots (holders only give back, so a taker that waits with some slots in hand blocks nobody for
    good), and a large lease is never starved by a stream of small ones. After `timeout_s` of waiting
    the block runs with what it has (a frozen holder is the pool's to replace; the judge does not stop
    for it). Seconds waited go to counting_waits' `wait_memory`."""
    want = min(slots, max(1, -(-nbytes // MEMORY_UNIT)))
    held: dict[int, int] = {}  # slot -> its flocked descriptor
    gate = _open(key, "memgate")
    t0 = time.monotonic()
    try:
        fcntl.flock(gate, fcntl.LOCK_EX)
        try:
            deadline, pause = t0 + timeout_s, poll_s
            while len(held) < want:
                for i in range(slots):
                    if len(held) == want:
                        break
                    if i in held:
                        continue
                    fd = _open(key, f"mem{i}")
                    try:
                        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    except BlockingIOError:
                        os.close(fd)
                        continue
                    held[i] = fd
                if len(held) < want:
                    if time.monotonic() >= deadline:
                        break
                    time.sleep(pause)  # a span lasts a second or so: no need to ask 200 times a second
                    pause = min(pause * 2, 20 * poll_s)
        finally:
            fcntl.flock(gate, fcntl.LOCK_UN)
        waited = time.monotonic() - t0
        waits = getattr(_held, "waits", None)
        if waits is not None:
            waits["wait_memory"] = waits.get("wait_memory", 0.0) + waited
        yield waited
    finally:
        for fd in held.values():
            os.close(fd)  # closing a descriptor drops its flock
        os.close(gate)


HOST_KEY = "host-candidates"  # one per host, whatever the device: a candidate's CPUs and disk are the host's


@contextlib.contextmanager
def candidate_alive() -> Iterator[None]:
    """Held shared by a judge from the moment its candidate's code loads until its sandbox is killed."""
    with _rw_lock(HOST_KEY, exclusive=False):
        yield


@contextlib.contextmanager
def no_candidates() -> Iterator[None]:
    """Held exclusively while a reference is timed: no candidate process is alive on the host (not this
    judge's, not another's), and none starts until the block ends (writer first). A candidate's child
    processes that kept the CPUs busy inflated a cached reference time 1.6-1.9x for every later
    candidate of that problem (issue 32, class 4)."""
    with _rw_lock(HOST_KEY, exclusive=True):
        yield


@contextlib.contextmanager
def _device_lock(device: str, exclusive: bool, what: str = "") -> Iterator[None]:
    key = gpu_key(device)
    if key is None or getattr(_held, "timing", False):
        yield
        return
    with _rw_lock(key, exclusive, what, timing=True):
        yield


@contextlib.contextmanager
def _rw_lock(key: str, exclusive: bool, what: str = "", timing: bool = False) -> Iterator[None]:
    """The gate, then the lock itself. A writer keeps the gate for the whole block, so no new reader
    gets in while it waits or holds; a reader lets go of the gate once it holds the lock shared.
    `timing`: the device's timing lock (the thread's flag and counters)."""
    mode = fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH
    gate = _open(key, "gate")
    data = -1
    waits = getattr(_held, "waits", None) if timing else None
    t0 = held = time.monotonic()
    try:
        # a writer waits here for another writer; a reader, while a writer waits or holds
        fcntl.flock(gate, mode)
        data = _open(key, "timing")
        fcntl.flock(data, mode)
        held = time.monotonic()
        if waits is not None:
            waits["wait_exclusive" if exclusive else "wait_shared"] += held - t0
        if exclusive and timing:
            _held.timing = True
        elif not exclusive:
            fcntl.flock(gate, fcntl.LOCK_UN)
        yield
    finally:
        if exclusive and timing:
            _held.timing = False
        if waits is not None and data >= 0:
            span = time.monotonic() - held
            if exclusive:
                waits["held_exclusive"] += span
            if what:
                waits[f"held_{what}"] = waits.get(f"held_{what}", 0.0) + span
        if data >= 0:
            os.close(data)  # closing a descriptor drops its flock
        os.close(gate)
