"""`check_executor`: the one contract every executor (fake, local, Ray, HTTP) must keep.

Input: an executor, or a zero-argument factory of one (then leaks are checked too); output: None,
or an AssertionError naming the broken clause. The candidates are real KernelBench-format sources
that also carry `# fake:` markers, so the same cases judge identically on a real judge and a double.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from drkernel.errors import ExecutorError
from drkernel.executors.base import Executor
from drkernel.types import EvalOptions, EvalOutcome, EvalRequest, EvalResult, EvalStatus

__all__ = ["CONTRACT_REFERENCE", "check_executor", "contract_requests"]

CONTRACT_REFERENCE = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(256)]


def get_init_inputs():
    return []
'''

_HEADER = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, tl.maximum(x, 0.0), mask=mask)

'''

_CASES: dict[str, tuple[str, str]] = {
    # name -> (marker, ModelNew body after the header)
    "honest": ("# fake: speedup=2.0", '''
class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        relu_kernel[(triton.cdiv(x.numel(), 128),)](x, out, x.numel(), BLOCK=128)
        return out
'''),
    "incorrect": ("# fake: incorrect", '''
class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        relu_kernel[(triton.cdiv(x.numel(), 128),)](x, out, x.numel(), BLOCK=128)
        return out + 1.0
'''),
    "compile_error": ("# fake: compile_error", '''
class ModelNew(nn.Module)
    def forward(self, x):
        return x
'''),
    "hack": ("# fake: hack=decoy_kernel", '''
class ModelNew(nn.Module):
    def forward(self, x):
        return torch.relu(x)
'''),
    "timeout": ("# fake: sleep=600", '''
class ModelNew(nn.Module):
    def forward(self, x):
        while True:
            pass
'''),
}

_EXPECTED = {
    "honest": EvalOutcome.OK,
    "incorrect": EvalOutcome.INCORRECT,
    "compile_error": EvalOutcome.COMPILE_ERROR,
    "hack": EvalOutcome.HACK_DETECTED,
    "timeout": EvalOutcome.TIMEOUT,
}


def contract_requests(names: list[str], prefix: str, timeout_s: float = 5.0) -> list[EvalRequest]:
    """One request per case name, task ids `<prefix>-<i>-<name>`."""
    options = EvalOptions(timeout_s=timeout_s, num_correct_trials=2, num_perf_trials=2,
                          num_warmup=1, profile=False)
    return [
        EvalRequest(
            reference_code=CONTRACT_REFERENCE,
            kernel_code=f"{_CASES[n][0]}\n{_HEADER}{_CASES[n][1]}",
            options=options,
            task_id=f"{prefix}-{i}-{n}",
        )
        for i, n in enumerate(names)
    ]


def _check_batch(ex: Executor, names: list[str], prefix: str, timeout_s: float) -> None:
    requests = contract_requests(names, prefix, timeout_s)
    results = ex.evaluate(requests)
    assert isinstance(results, list), f"evaluate returned {type(results).__name__}, not a list"
    assert len(results) == len(requests), f"{len(requests)} requests, {len(results)} results"
    for name, req, res in zip(names, requests, results, strict=True):
        assert isinstance(res, EvalResult), f"{req.task_id}: {type(res).__name__} is not an EvalResult"
        assert res.task_id in (None, req.task_id), f"order broken: {req.task_id} got {res.task_id}"
        assert res.outcome is _EXPECTED[name], f"{req.task_id}: {res.outcome} != {_EXPECTED[name]}"
        if name == "honest":
            assert res.correct and res.compiled and not res.hacks, f"{req.task_id}: {res}"
        else:
            assert not res.correct, f"{req.task_id}: a {name} candidate marked correct"
        if name == "hack":
            assert res.hacks, f"{req.task_id}: hack detected but no hack code"
        if name == "timeout":
            assert res.status is EvalStatus.TIMEOUT, f"{req.task_id}: timeout status {res.status}"
        again = EvalResult.from_dict(json.loads(json.dumps(res.to_dict())))
        assert again.to_dict() == res.to_dict(), f"{req.task_id}: result contract does not round-trip"


def _children() -> set[int]:
    """Live child processes of this process (Linux /proc; else multiprocessing's own)."""
    pids: set[int] = set()
    task_dir = Path(f"/proc/{os.getpid()}/task")
    if task_dir.is_dir():
        for task in task_dir.iterdir():
            try:
                text = (task / "children").read_text()
            except OSError:  # the thread ended meanwhile, or no children file
                continue
            pids.update(int(p) for p in text.split())
        return pids
    return {p.pid for p in multiprocessing.active_children() if p.pid}


def _helpers() -> set[int]:
    """multiprocessing's own long-lived helper (the resource tracker) is not a leak."""
    from multiprocessing import resource_tracker

    pid = getattr(resource_tracker._resource_tracker, "_pid", None)
    return {pid} if pid else set()


def _check_no_leaks(threads: set[int], children: set[int], grace_s: float) -> None:
    deadline = time.monotonic() + grace_s
    while True:
        extra_threads = [t.name for t in threading.enumerate() if t.ident not in threads and t.is_alive()]
        extra_children = _children() - children - _helpers()
        if not extra_threads and not extra_children:
            return
        if time.monotonic() > deadline:
            raise AssertionError(
                f"leak after close(): threads {extra_threads}, child processes {sorted(extra_children)}"
            )
        time.sleep(0.1)


def check_executor(
    executor: Executor | Callable[[], Executor],
    *,
    timeout_s: float = 20.0,
    timeouts: bool = True,
    concurrency: bool = True,
    strict_close: bool = True,
    leak_grace_s: float = 15.0,
) -> None:
    """Raise AssertionError unless `executor` keeps the Executor contract.

    Clauses: results come back as EvalResults in request order, one per request; a bad kernel is a
    result (never an exception); a candidate past its budget ends as a TIMEOUT status; results
    round-trip through the JSON contract; an empty batch is fine; concurrent callers get their own
    results; `close()` is idempotent and (`strict_close`) afterwards `evaluate` raises
    ExecutorError; with a factory, no thread or child process outlives `close()`. `timeout_s` is
    the per-candidate budget (the timeout case spends it once per batch).
    """
    threads = {t.ident for t in threading.enumerate() if t.ident is not None}
    children = _children()
    ex = executor() if callable(executor) and not isinstance(executor, Executor) else executor
    assert isinstance(ex, Executor), f"{type(ex).__name__} does not implement Executor"
    try:
        assert ex.evaluate([]) == [], "an empty batch must give an empty list"
        names = ["honest", "incorrect", "compile_error", "hack"] + (["timeout"] if timeouts else [])
        _check_batch(ex, names, "contract-a", timeout_s)
        _check_batch(ex, ["hack", "honest"], "contract-b", timeout_s)  # reuse after a batch; a single order
        if concurrency:
            with ThreadPoolExecutor(2) as pool:
                jobs = [pool.submit(_check_batch, ex, ["honest", "incorrect"], "contract-c", timeout_s),
                        pool.submit(_check_batch, ex, ["incorrect", "honest"], "contract-d", timeout_s)]
                for job in jobs:
                    job.result()
    finally:
        ex.close()
    ex.close()  # idempotent
    if strict_close:
        _check_closed(ex)
    if callable(executor) and not isinstance(executor, Executor):
        _check_no_leaks(threads, children, leak_grace_s)


def _check_closed(ex: Executor) -> None:
    try:
        ex.evaluate(contract_requests(["honest"], "contract-closed"))
    except ExecutorError:
        pass
    else:
        raise AssertionError("evaluate after close() must raise ExecutorError")
