"""The device's measured ceilings: the bandwidth and matmul rates that no honest kernel beats.

The speed-of-light check (stages/timing.py) flags a kernel timed past the bandwidth measured here.
A copy alone is not the ceiling: it reads and writes at once, and an honest read-only reduction ran
12% faster than it (107_Max_reduction_over_last_dim, 4525 GB/s against a copy's 4032 on an H200,
docs/benchmarks.md run U). So the bandwidth is the best of a copy, torch's own reduction, and a
Triton read-only row maximum of the shape such solutions use.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

import torch

# Where a cached peak was measured another way, it is measured again (the cache key's method).
METHOD = "peak-v2"


def _row_max_kernel() -> Any:
    """A Triton read-only kernel: one program per row of 8192 floats, the max of the row."""
    import triton
    import triton.language as tl

    # no annotations: @triton.jit reads them
    @triton.jit
    def row_max(x_ptr, o_ptr, n, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]  # noqa: N803
        row = tl.program_id(0)
        best = tl.full((BLOCK,), -float("inf"), tl.float32)
        for c0 in range(0, n, BLOCK):
            cols = c0 + tl.arange(0, BLOCK)
            best = tl.maximum(best, tl.load(x_ptr + row * n + cols, mask=cols < n, other=-float("inf")))
        tl.store(o_ptr + row, tl.max(best, axis=0))

    return row_max


def bandwidth_candidates(device: torch.device, n: int = 1 << 28) -> dict[str, tuple[Callable[[], Any], int]]:
    """Each way of moving memory, with the bytes it moves: a copy, torch's reduction, Triton's read."""
    cols = min(8192, n)
    src = torch.randn(n // cols, cols, device=device)
    dst = torch.empty_like(src)
    rows_out = torch.empty(n // cols, device=device)
    nbytes = n * 4
    found: dict[str, tuple[Callable[[], Any], int]] = {
        "copy": (lambda: dst.copy_(src), 2 * nbytes),
        "torch_amax": (lambda: torch.amax(src, dim=-1), nbytes),
    }
    try:
        kernel = _row_max_kernel()
    except Exception:  # no Triton here: the torch measurements stand alone
        return found

    def read_rows(block: int) -> Callable[[], Any]:
        return lambda: kernel[(n // cols,)](src, rows_out, cols, BLOCK=block)

    for block in (1024, 2048):
        found[f"triton_row_max_{block}"] = (read_rows(block), nbytes)
    return found


Timer = Callable[[Callable[[], Any], int], list[float]]


def event_timer(clock: Callable[[], tuple[Any, Any]], record: Callable[[Any], Any],
                elapsed: Callable[[Any, Any], float], sync: Callable[[], Any],
                spin: Callable[[int], Any] | None = None, spin_cycles: int = 0) -> Timer:
    """A Timer: `reps` calls of fn, one at a time, each between a pair of events from `clock()`, after
    one untimed call. With `spin`, a GPU spin of `spin_cycles` is queued before each start event, so the
    call is submitted while the GPU is busy (bench/peak_probe.py times the ways so too)."""

    def times_ms(fn: Callable[[], Any], reps: int) -> list[float]:
        fn()
        sync()
        times = []
        for _ in range(reps):
            start, end = clock()
            if spin is not None and spin_cycles:
                spin(spin_cycles)
            record(start)
            fn()
            record(end)
            sync()
            times.append(elapsed(start, end))
        return times

    return times_ms


def measure(device: torch.device, times_ms: Timer, n: int = 1 << 28,
            m: int = 8192) -> tuple[float, float, float, dict[str, float]]:
    """(bandwidth GB/s, fp32 TFLOP/s, bf16 TFLOP/s, GB/s of each bandwidth way) on a CUDA device.

    ``times_ms(fn, reps)`` times `reps` calls of fn on the device, one at a time (the caller's events).
    A bandwidth is its fastest call (the ceiling is the best the device does: a median let the copy
    vary 3829-4195 GB/s between two measurements, run V), a matmul rate its median call. n floats are
    moved (1 GiB, far past an H200's 60 MB of L2), m x m matrices multiplied."""
    ways: dict[str, float] = {}
    for name, (fn, nbytes) in bandwidth_candidates(device, n).items():
        try:
            ms = min(times_ms(fn, 10))
        except Exception:  # a way that fails to compile or run here is no ceiling; the copy always runs
            if name == "copy":
                raise
            continue
        if ms > 0:
            ways[name] = nbytes / (ms * 1e6)
    # (no empty_cache: the reference's sandbox keeps its reserved memory, sandbox/inside/devicemem.py)
    a, b = torch.randn(m, m, device=device), torch.randn(m, m, device=device)
    tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        fp32_ms = statistics.median(times_ms(lambda: a @ b, 5))
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32
    a16, b16 = a.bfloat16(), b.bfloat16()
    bf16_ms = statistics.median(times_ms(lambda: a16 @ b16, 10))
    flops = 2.0 * m**3
    return max(ways.values()), flops / (fp32_ms * 1e9), flops / (bf16_ms * 1e9), ways
