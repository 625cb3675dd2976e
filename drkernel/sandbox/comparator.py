"""Where the judge compares outputs: in its own process on a CPU judge, in a child process on a GPU.

A GPU judge never touches the device itself. Its comparisons (and the reference fingerprints of
the weak_reference warning) run in a trusted child process that holds the only CUDA context of the
judge. A fault there (a device-side assert, an exception in a comparison step, a dead child) is the
judge's fault: it raises JudgeFault, never a verdict on the candidate, and the child is replaced.

A job is a `helpermsg.CompareJob`, its reply a `helpermsg.CompareReply`; the child process answers
each job with a `helpermsg.CompareAnswer`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import select
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch

from drkernel.sandbox.comparison import MAX_OUTPUT_BYTES, compare_outputs, layout_issue, load_tensors
from drkernel.sandbox.plumbing.process import ComparisonProcess
from drkernel.sandbox.wire.helpermsg import CompareAnswer, CompareJob, CompareReply
from drkernel.sandbox.wire.protocol import ProtocolError, read_message, write_message
from drkernel.sandbox.wire.tensorfile import Entry, TensorFileError, read_header

__all__ = ["JudgeFault", "LocalComparator", "ProcessComparator", "claim_fault", "compare_job", "fingerprint",
           "make_comparator"]

_PRINT_ELEMENTS = 4096


class JudgeFault(Exception):
    """A fault of the judge's own comparison step: infra_error (judge_error), never a verdict."""


def fingerprint(tensors: list[Any]) -> torch.Tensor:
    """Up to 4096 evenly spaced elements of each output, as float64 on the CPU, concatenated.

    Indices are computed in int64: a float32 linspace rounds past the end above 2**24 elements.
    """
    parts = []
    for t in tensors:
        if not isinstance(t, torch.Tensor) or t.numel() == 0 or t.is_complex():
            continue
        flat = t.detach().reshape(-1)
        n = flat.numel()
        steps = min(n, _PRINT_ELEMENTS)
        idx = torch.arange(steps, dtype=torch.int64) * (n - 1) // max(steps - 1, 1)
        parts.append(flat[idx.to(flat.device)].to(torch.float64).cpu())
    part = torch.cat(parts) if parts else torch.zeros(0, dtype=torch.float64)
    return torch.nan_to_num(part, nan=0.0, posinf=0.0, neginf=0.0)


_loader: ThreadPoolExecutor | None = None
_loader_lock = threading.Lock()


def _load_pair(ref: tuple[str, int], out: tuple[str, int], device: str) -> tuple[list[Any], list[Any]]:
    """Read the reference's and the candidate's files at once (large outputs: ~0.4 s/GiB each)."""
    global _loader
    with _loader_lock:
        if _loader is None:
            _loader = ThreadPoolExecutor(max_workers=4, thread_name_prefix="drkernel-load")
    ref_future = _loader.submit(load_tensors, ref[0], ref[1], device)
    try:
        out_t = load_tensors(out[0], out[1], device)
    finally:
        ref_t = ref_future.result()  # never leave a read running on a file about to be removed
    return ref_t, out_t


def compare_job(job: CompareJob, device: str) -> CompareReply:
    """Load one output pair and compare it. A bad candidate file is a failed comparison; anything
    else that goes wrong here (a CUDA error, a bug) propagates as the judge's own fault."""
    try:
        if job.expect is not None:  # checked from the header, before a byte of the data is read
            issue = _header_issue(read_header(job.out_path, job.out_count, MAX_OUTPUT_BYTES), job.expect)
            if issue is not None:
                return CompareReply(passed=False, issue=issue)
        ref_t, out_t = _load_pair((job.ref_path, job.ref_count), (job.out_path, job.out_count), device)
    except (OSError, TensorFileError, KeyError) as exc:
        return CompareReply(passed=False, issue=f"unreadable output: {exc}")
    prints = fingerprint(ref_t).tolist() if job.fingerprint else None
    c = compare_outputs(job.ref_structure, ref_t, job.out_structure, out_t, job.atol, job.rtol, job.relative)
    return CompareReply(passed=c.passed, issue=c.issue, max_abs_diff=c.max_abs_diff,
                        max_rel_diff=c.max_rel_diff, rel_l2=c.rel_l2, mean_abs_diff=c.mean_abs_diff,
                        fingerprint=prints)


def _header_issue(entries: list[Entry], expect: list[list[Any]]) -> str | None:
    """What differs between a candidate file's tensors and the reference's, in compare_outputs' words."""
    if len(entries) != len(expect):
        return "output structure differs from the reference (tuple/list/tensor layout)"
    issues = (layout_issue(e.dtype, e.shape, dtype, shape)
              for e, (dtype, shape) in zip(entries, expect, strict=True))
    return next((i for i in issues if i is not None), None)


def _inject(kind: str | None, device: str) -> None:
    """The debug hook: make this comparison fail the way a broken judge would."""
    if kind == "device_assert" and device.startswith("cuda"):
        x = torch.zeros(4, device=device)
        x[torch.tensor([1 << 40], device=device)] = 1.0  # an out-of-range index: a device-side assert
        torch.cuda.synchronize(device)
    elif kind:
        raise RuntimeError(f"injected judge fault ({kind})")


class LocalComparator:
    """Compares in the judge's own process: a CPU judge, where no device state can be poisoned."""

    def __init__(self, device: str = "cpu", fault: str | None = None) -> None:
        self.device = device
        self._fault = fault

    def compare(self, job: CompareJob) -> CompareReply:
        fault, self._fault = self._fault, None
        try:
            _inject(fault, self.device)
            return compare_job(job, self.device)
        except Exception as exc:  # noqa: BLE001 - whatever breaks here is the judge's, not the candidate's
            raise JudgeFault(f"{type(exc).__name__}: {exc}") from exc

    def restart(self) -> None:
        """Nothing to replace in-process on a CPU."""

    def signal_kill(self) -> None:
        """No process to stop."""

    def close(self) -> None:
        pass


class ProcessComparator:
    """Compares in a child process that holds the judge's only CUDA context; replaced on a fault."""

    def __init__(self, device: str, fault: str | None = None,
                 started: ComparisonProcess | None = None) -> None:
        """`started`: a comparison child started earlier for this device (`drkernel eval` starts one
        before importing torch); owned from here."""
        self.device = device
        self._fault = fault
        self._child: ComparisonProcess | None = started or ComparisonProcess(device)

    def compare(self, job: CompareJob) -> CompareReply:
        fault, self._fault = self._fault, None
        try:
            if self._child is None:
                raise ProtocolError("it was closed")
            write_message(self._child.w, dataclasses.replace(job, inject=fault).to_wire())
            answer = self._receive(self._child, deadline=time.monotonic() + 600.0)
        except (OSError, ProtocolError) as exc:
            raise JudgeFault(f"the comparison process failed: {exc}") from exc
        if answer.result is None:
            raise JudgeFault(answer.error or "the comparison process failed")
        return answer.result

    def _receive(self, child: ComparisonProcess, deadline: float) -> CompareAnswer:
        while True:
            ready, _, _ = select.select([child.r], [], [], 0.05)
            if ready:
                return CompareAnswer.from_wire(read_message(child.r))
            code = child.proc.poll()
            if code is not None:
                why = f" (it could not select {self.device})" if code == NO_DEVICE_STATUS else ""
                raise ProtocolError(f"it exited with status {code}{why}")
            if time.monotonic() > deadline:
                raise ProtocolError("it did not answer within 600 s")

    def restart(self) -> None:
        self.close()
        self._child = ComparisonProcess(self.device)

    def signal_kill(self) -> None:
        """SIGKILL the child and return at once (close() then waits): its CUDA context's teardown
        overlaps the sandboxes'."""
        if self._child is not None:
            self._child.signal_kill()

    def close(self) -> None:
        if self._child is not None:
            self._child.close()
            self._child = None


NO_DEVICE_STATUS = 3  # the comparison child's exit status where it cannot select its device


def claim_fault(spec: str | None) -> str | None:
    """The fault a judge's first comparison is to meet (JudgeSettings.debug_fault, a test hook):
    "KIND" for every judge; "KIND@PATH" only for the first judge that creates PATH (once across
    processes: a pool that retries on a fresh judge meets no second)."""
    if spec is None or "@" not in spec:
        return spec
    kind, _, marker = spec.partition("@")
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW, 0o600))
    except FileExistsError:
        return None
    return kind


def make_comparator(device: str, started: ComparisonProcess | None = None,
                    fault: str | None = None) -> LocalComparator | ProcessComparator:
    """`started`: a comparison child started earlier; used where it was started for `device`, else closed.
    `fault`: what the first comparison meets (claim_fault; None in every real judge)."""
    cuda = device.startswith("cuda")
    if started is not None and (not cuda or started.device != device or started.proc.poll() is not None):
        started.close()
        started = None
    if cuda:
        return ProcessComparator(device, fault, started)
    return LocalComparator(device, fault)


def _warm(device: str) -> None:
    """One comparison of two small files, before any job: the CUDA context, the comparison's kernels and
    its loading path are set up while the judge's sandboxes start, not in the first evaluation's first
    comparison (0.24 s of a single `drkernel eval` on the H200, docs/benchmarks.md run AK)."""
    import tempfile

    from drkernel.sandbox.wire.tensorfile import write_tensors

    with tempfile.TemporaryDirectory(prefix="drkernel-compare-warm-") as folder:
        x = torch.randn(4096)
        ref, out = os.path.join(folder, "ref"), os.path.join(folder, "out")
        write_tensors(ref, [x])
        write_tensors(out, [x + 1e-6])
        compare_job(CompareJob(ref_path=ref, ref_count=1, out_path=out, out_count=1, ref_structure={"t": 0},
                               out_structure={"t": 0}, atol=None, rtol=None, relative=True, fingerprint=True),
                    device)
    torch.cuda.synchronize(device)


def _serve(cmd_fd: int, resp_fd: int, device: str) -> None:
    import ctypes
    import signal

    with contextlib.suppress(OSError, AttributeError):  # die with the judge
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if device.startswith("cuda"):
        try:
            torch.cuda.set_device(device)
        except Exception:  # noqa: BLE001 - a device the judge would refuse (a prestart's guess): no traceback
            os._exit(NO_DEVICE_STATUS)
        with contextlib.suppress(Exception):  # a fault that stays shows in the first real comparison
            _warm(device)
            # a pair of large outputs, held before any candidate runs (sandbox/inside/devicemem.py)
            from drkernel.sandbox.inside import devicemem

            devicemem.reserve(torch.device(device), devicemem.COMPARISON_BYTES)
    while True:
        try:
            job = CompareJob.from_wire(read_message(cmd_fd))
        except (ProtocolError, OSError):
            return
        try:
            _inject(job.inject, device)
            answer = CompareAnswer(result=compare_job(job, device))
        except Exception as exc:  # noqa: BLE001 - process edge: report, then die (the state may be poisoned)
            write_message(resp_fd, CompareAnswer(error=f"{type(exc).__name__}: {exc}"[:4000]).to_wire())
            return
        write_message(resp_fd, answer.to_wire())
        if device.startswith("cuda"):  # a large pair's memory goes back to the device, not kept for the next
            from drkernel.sandbox.inside import devicemem

            devicemem.trim(torch.device(device), devicemem.COMPARISON_BYTES)


if __name__ == "__main__":
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is its judge's to handle; it dies with the judge
    _serve(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3])
