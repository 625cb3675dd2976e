"""Two GPUs of one host (issue 38, item 2): a judge given `cuda:1` works on GPU 1 and takes GPU 1's
timing lock; judges of one GPU take turns on its lock, judges of two GPUs do not wait on each other.

Runs where torch sees at least two GPUs (`bash bench/gpu_all.sh twogpu` on an `nvidia-h200-x2`);
skipped elsewhere. What it shows, deterministically, with the lock held by the test itself:
- GPU 0's timing lock held for the whole evaluation does not slow a `cuda:1` judge (it never waits on it);
- GPU 1's timing lock held for 8 s is waited for by the `cuda:1` judge: its lock is GPU 1's;
- while the `cuda:1` judge evaluates, GPU 1's free memory drops by what its sandboxes hold, and GPU 0's
  does not: it runs there.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
import torch

from drkernel.device import gpu_key
from drkernel.sandbox.devicelock import timing_lock
from drkernel.sandbox.judge import Judge
from drkernel.types import EvalOptions, EvalOutcome, EvalRequest, EvalResult
from tests.sandbox.corpus import asset, reference_code

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2,
                       reason="needs two CUDA GPUs"),
]

OPTIONS = EvalOptions(num_correct_trials=3, num_perf_trials=20, num_warmup=3, timeout_s=300.0)
HOLD_S = 8.0


def _reference(n: int = 4096) -> str:
    return reference_code("relu_scale").replace("batch_size = 8", f"batch_size = {n}").replace(
        "dim = 256", f"dim = {n}")


@pytest.fixture(scope="module")
def judge1() -> Iterator[Judge]:
    with Judge(device="cuda:1", cache_path=None) as j:
        yield j


def _evaluate(judge: Judge) -> EvalResult:
    kernel = asset("kernels", "relu_scale")
    return judge.evaluate(EvalRequest(reference_code=_reference(), kernel_code=kernel.code, options=OPTIONS))


def _hold(device: str, release: threading.Event, held: threading.Event, seconds: float = 600.0) -> None:
    with timing_lock(device, "test"):
        held.set()
        release.wait(seconds)


def _waited(result: EvalResult) -> float:
    return result.stage_s.get("lock_wait_exclusive", 0.0) + result.stage_s.get("lock_wait_shared", 0.0)


def test_the_two_gpus_have_two_locks() -> None:
    assert gpu_key("cuda:0") != gpu_key("cuda:1")


def test_a_cuda1_judge_does_not_wait_for_gpu0s_lock_and_runs_on_gpu1(judge1: Judge) -> None:
    _evaluate(judge1)  # warm: the reference timed and cached, the sandboxes' first costs paid
    free: dict[int, list[int]] = {0: [], 1: []}
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            for i in (0, 1):
                free[i].append(torch.cuda.mem_get_info(i)[0])
            time.sleep(0.05)

    held, release = threading.Event(), threading.Event()
    holder = threading.Thread(target=_hold, args=("cuda:0", release, held), daemon=True)
    watcher = threading.Thread(target=sample, daemon=True)
    base = {i: torch.cuda.mem_get_info(i)[0] for i in (0, 1)}
    watcher.start()
    holder.start()
    assert held.wait(30)
    try:
        result = _evaluate(judge1)  # GPU 0's lock is ours for the whole of it
    finally:
        release.set()
        stop.set()
        watcher.join()
        holder.join()
    assert result.outcome is EvalOutcome.OK, (result.outcome, result.error, result.hack_details)
    assert _waited(result) < 2.0, result.stage_s
    used = {i: base[i] - min(free[i]) for i in (0, 1)}
    assert used[1] > 256 << 20 and used[0] < used[1] / 4, used  # its sandboxes' memory is on GPU 1


def test_a_cuda1_judge_waits_for_gpu1s_lock(judge1: Judge) -> None:
    held, release = threading.Event(), threading.Event()
    holder = threading.Thread(target=_hold, args=("cuda:1", release, held, HOLD_S), daemon=True)
    holder.start()
    assert held.wait(30)
    try:
        result = _evaluate(judge1)
    finally:
        release.set()
        holder.join()
    assert result.outcome is EvalOutcome.OK, (result.outcome, result.error, result.hack_details)
    # the lock was taken before the evaluation started and given back HOLD_S later; the evaluation's
    # first locked section comes a second or two in (its sandbox starts, its correctness trials)
    assert _waited(result) > HOLD_S / 2, result.stage_s
