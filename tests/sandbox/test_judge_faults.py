"""No verdict from a broken judge, at the sizes the GPU uses.

A fault in the judge's own comparison step (on a GPU: a device-side assert in its CUDA context) is
infra_error of kind judge_error, never a verdict on the candidate; the judge replaces its device
state and tries once more, so the caller still gets the real verdict.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import torch

from drkernel.sandbox import comparator
from drkernel.sandbox.comparator import JudgeFault, LocalComparator, fingerprint
from drkernel.sandbox.judge import Judge
from drkernel.sandbox.wire.helpermsg import CompareJob
from drkernel.server.launch import ServerProcess
from drkernel.types import EvalOutcome, EvalRequest
from tests.sandbox.corpus import FAST, asset, reference_code

# 4100 x 4096 fp32 outputs: 16,793,600 elements, past 2**24, where a float32 index rounds past the end
BIG_REF = reference_code("relu_scale").replace("batch_size = 8", "batch_size = 4100").replace(
    "dim = 256", "dim = 4096")
# the same honest kernel with blocks of 64K elements, so the interpreter runs 257 programs a call
BIG_KERNEL = asset("kernels", "relu_scale").code.replace(
    "triton.cdiv(n, 1024)", "triton.cdiv(n, 65536)").replace("BLOCK_SIZE=1024", "BLOCK_SIZE=65536")
HONEST = asset("kernels", "relu_scale")


def test_fingerprint_indices_stay_inside_tensors_past_2_24_elements() -> None:
    n = 4100 * 4096
    t = torch.arange(n, dtype=torch.float32)
    p = fingerprint([t])
    assert p.numel() == 4096
    assert float(p[0]) == 0.0 and float(p[-1]) == float(t[-1])  # the last element, not one past it
    assert bool((p[1:] >= p[:-1]).all())


@pytest.fixture(scope="module")
def judge() -> Iterator[Judge]:
    with Judge(device="cpu", cache_path=None, spares=1) as j:
        yield j


def test_honest_kernel_with_a_64_mb_output_is_ok(judge: Judge) -> None:
    r = judge.evaluate(EvalRequest(reference_code=BIG_REF, kernel_code=BIG_KERNEL,
                                   options=FAST.replace(num_correct_trials=2, timeout_s=300.0)))
    assert r.outcome is EvalOutcome.OK, (r.error, r.trials)
    assert r.correct and r.judge_retries == 0


def test_a_fault_in_the_comparison_is_the_judges_and_the_retry_gives_the_verdict() -> None:
    # the debug hook: the first comparison raises
    with Judge(device="cpu", cache_path=None, spares=1, debug_fault="compare") as j:
        r = j.evaluate(EvalRequest(reference_code=HONEST.reference, kernel_code=HONEST.code, options=FAST))
        assert r.outcome is EvalOutcome.OK, r.error
        assert r.judge_retries == 1 and j.judge_restarts == 1
        again = j.evaluate(EvalRequest(reference_code=HONEST.reference, kernel_code=HONEST.code,
                                       options=FAST))
        assert again.outcome is EvalOutcome.OK and again.judge_retries == 0


def test_a_judge_that_stays_broken_reports_infra_error_never_a_verdict(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(self: LocalComparator, job: dict) -> dict:
        raise JudgeFault("RuntimeError: CUDA error: device-side assert triggered")

    monkeypatch.setattr(comparator.LocalComparator, "compare", broken)
    with Judge(device="cpu", cache_path=None, spares=1) as j:
        r = j.evaluate(EvalRequest(reference_code=HONEST.reference, kernel_code=HONEST.code, options=FAST))
        assert r.outcome is EvalOutcome.INFRA_ERROR
        assert (r.error is not None and r.error.kind == "judge_error"
                and "device-side assert" in r.error.message)
        assert not r.correct and r.reward == 0.0 and not r.hacks
        assert r.judge_retries == 1 and j.judge_restarts == 2


def test_a_bad_candidate_file_is_still_the_candidates(tmp_path: Path) -> None:
    """Unreadable candidate output fails the comparison; it is not a judge fault."""
    bad = tmp_path / "out.bin"
    bad.write_bytes(b"not a tensor file")
    ref = tmp_path / "ref.bin"
    from drkernel.sandbox.wire.tensorfile import write_tensors

    write_tensors(str(ref), [torch.ones(3)])
    job = CompareJob(ref_path=str(ref), ref_count=1, out_path=str(bad), out_count=1, ref_structure={"t": 0},
                     out_structure={"t": 0}, atol=None, rtol=None, relative=True, fingerprint=True)
    c = LocalComparator().compare(job)
    assert c.passed is False and c.issue is not None and "unreadable output" in c.issue


@pytest.mark.slow
def test_through_drkernel_serve_a_judge_fault_still_gives_the_real_verdict(tmp_path: Path) -> None:
    import os
    import time

    # the first judge faults on its first comparison and retries it on fresh device state (the one
    # retry layer for a judge fault); the pool does not run it a third time
    env = dict(os.environ, DRKERNEL_DEBUG_JUDGE_FAULT=f"compare@{tmp_path / 'fault-once'}")
    task = {"task_id": "fault-1", "reference_code": HONEST.reference, "kernel_code": HONEST.code,
            "options": {"num_correct_trials": 2, "num_perf_trials": 3, "timeout_s": 120}}
    with ServerProcess(tmp_path / "f.db", extra=["--judge", "sandbox", "--workers", "1"], env=env) as server:
        assert httpx.post(f"{server.url}/v1/tasks", json=task, timeout=30).status_code in (200, 201, 202)
        deadline = time.monotonic() + 300
        view: dict = {}
        while time.monotonic() < deadline:
            view = httpx.get(f"{server.url}/v1/tasks/fault-1", params={"wait": 30}, timeout=60).json()
            if view.get("result"):
                break
    result = view["result"]
    assert result["outcome"] == "ok", result.get("error")
    assert result["judge_retries"] == 1


def test_a_candidate_file_is_checked_against_the_references_shapes_before_it_is_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 13: a candidate's output file is size-checked against the expected dtype and shape (the
    reference's) before a byte of its data is read: a file of another shape, however large, is a
    failed comparison with the usual message, and never loaded."""
    from drkernel.sandbox.wire.tensorfile import write_tensors

    ref, out = tmp_path / "ref.bin", tmp_path / "out.bin"
    write_tensors(str(ref), [torch.ones(3, 4)])
    loaded: list[str] = []
    real = comparator.load_tensors

    def spy(path: str, *args: object, **kwargs: object) -> list:
        loaded.append(path)
        return real(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(comparator, "load_tensors", spy)
    job = CompareJob(ref_path=str(ref), ref_count=1, out_path=str(out), out_count=1, ref_structure={"t": 0},
                     out_structure={"t": 0}, atol=None, rtol=None, relative=True, fingerprint=False,
                     expect=[["torch.float32", [3, 4]]])
    for tensor, issue in ((torch.ones(1 << 20), "shape mismatch"),
                          (torch.ones(3, 4, dtype=torch.float16), "dtype mismatch")):
        write_tensors(str(out), [tensor])
        loaded.clear()
        c = comparator.compare_job(job, "cpu")
        assert c.passed is False and c.issue is not None and issue in c.issue, c
        assert str(out) not in loaded, loaded
    write_tensors(str(out), [torch.ones(3, 4), torch.ones(2)])  # another count of outputs
    c = comparator.compare_job(dataclasses.replace(job, out_count=2), "cpu")
    assert c.passed is False and c.issue is not None and "structure" in c.issue, c
    write_tensors(str(out), [torch.ones(3, 4)])  # the expected one is read and compared as before
    assert comparator.compare_job(job, "cpu").passed is True


def test_a_stopped_fork_server_is_replaced_and_the_evaluation_goes_on(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 33: a fork server that was stopped (SIGSTOP) kept every later sandbox start waiting for 120 s.
    A stopped one is not alive (its /proc state), and one that has answered before and then stays
    silent past SPAWN_TIMEOUT_S is taken for frozen: either way the judge starts another."""
    import contextlib
    import os
    import signal
    import time

    from drkernel.sandbox.plumbing import process

    monkeypatch.setattr(process, "SPAWN_TIMEOUT_S", 3.0)
    code, ref = asset("kernels", "relu_scale").code, reference_code("relu_scale")
    with Judge(device="cpu", cache_path=None, spares=1) as j:
        first = j.evaluate(EvalRequest(reference_code=ref, kernel_code=code, options=FAST))
        assert first.outcome is EvalOutcome.OK, first.error
        zygote = j._zygote
        assert zygote is not None and zygote.alive()
        os.kill(zygote.proc.pid, signal.SIGSTOP)
        try:
            deadline = time.monotonic() + 5
            while zygote.alive() and time.monotonic() < deadline:
                time.sleep(0.05)
            assert not zygote.alive()  # stopped: seen at once
            t0 = time.monotonic()
            second = j.evaluate(EvalRequest(reference_code=ref, kernel_code=code, options=FAST))
            assert second.outcome is EvalOutcome.OK, second.error
            assert time.monotonic() - t0 < 60
            assert j._zygote is not zygote
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(zygote.proc.pid, signal.SIGCONT)
            zygote.close()


def test_a_fork_server_that_answered_once_and_then_stays_silent_is_replaced(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Frozen without being stopped (stuck in a call): the spawn waits SPAWN_TIMEOUT_S, not 120 s."""
    import time

    from drkernel.sandbox.plumbing import process

    monkeypatch.setattr(process, "SPAWN_TIMEOUT_S", 2.0)
    code, ref = asset("kernels", "relu_scale").code, reference_code("relu_scale")
    with Judge(device="cpu", cache_path=None, spares=1) as j:
        first = j.evaluate(EvalRequest(reference_code=ref, kernel_code=code, options=FAST))
        assert first.outcome is EvalOutcome.OK
        old = j._zygote
        assert old is not None

        def silent(request, fds, timeout_s=None):  # noqa: ANN001, ANN202 - a fork server stuck in a call
            time.sleep(process.SPAWN_TIMEOUT_S)
            raise process.SandboxFailure("sandbox_start", "the fork server did not answer: timed out")

        monkeypatch.setattr(old, "spawn", silent)
        t0 = time.monotonic()
        r = j.evaluate(EvalRequest(reference_code=ref, kernel_code=code, options=FAST))
        assert r.outcome is EvalOutcome.OK, r.error
        assert j._zygote is not old and time.monotonic() - t0 < 60
