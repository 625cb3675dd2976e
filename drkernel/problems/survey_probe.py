"""The survey's reference probe: one Problem at full size -> a dict of facts, in a process of its own.

A reference that runs out of memory, hangs or kills its process costs the survey one row, never the
run: `ProbeWorker` keeps one spawned child (torch imported once), kills it on a timeout or a crash,
and starts a new one for the next problem. Every failure comes back as a reason, never raised.
"""

from __future__ import annotations

import contextlib
import io
import logging
import math
import multiprocessing
import time
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any

from drkernel.problems.audit import AuditConfig, ProblemAudit, probe_outputs
from drkernel.types import Problem

__all__ = ["ProbeWorker", "failure_reason", "probe_reference"]

log = logging.getLogger(__name__)


def failure_reason(exc: BaseException) -> str:
    """A short machine reason for a reference that does not run: oom | unsupported_dtype |
    unsupported_op | missing_module | error."""
    text = f"{type(exc).__name__}: {exc}".lower()
    if "outofmemory" in text or "out of memory" in text:
        return "oom"
    if isinstance(exc, ModuleNotFoundError):
        return "missing_module"
    if "dtype" in text or ("not implemented for" in text and "'" in text):
        return "unsupported_dtype"
    if isinstance(exc, NotImplementedError) or "not implemented" in text or "no kernel" in text:
        return "unsupported_op"
    return "error"


def probe_reference(problem: Problem, device: str, cfg: AuditConfig) -> dict[str, Any]:
    """The reference's outputs across seeds (the weak-reference audit), whether it repeats itself on
    the same inputs, its bytes and counted FLOPs, and what the judge's null candidates need."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from drkernel.problems.reference import flatten_tensors

    started = time.monotonic()
    audit = ProblemAudit(name=problem.name, level=problem.level)
    try:
        model, inputs, outs = probe_outputs(problem, cfg, audit, device)
        first = [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs[0]]
        counter = FlopCounterMode(display=False)
        with torch.no_grad(), counter:
            raw = list(flatten_tensors(model(*first)))
        again = [t.detach().float() for t in raw]
        diff = max((_repeat_diff(a, b) for a, b in zip(again, outs[0], strict=True) if a.numel()),
                   default=0.0)
        tensors_in = list(flatten_tensors(inputs[0]))
        single = len(raw) == 1 and raw[0].dtype == torch.float32
        identity = next((i for i, x in enumerate(inputs[0]) if single and isinstance(x, torch.Tensor)
                         and x.shape == raw[0].shape and x.dtype == torch.float32), None)
        flops = float(counter.get_total_flops())
        facts: dict[str, Any] = {
            "ok": True,
            "outputs": [{"shape": list(t.shape), "dtype": str(t.dtype).removeprefix("torch.")} for t in raw],
            "max_abs": audit.max_abs, "variation": audit.variation,
            "audit_flags": list(audit.flags), "audit_nulls": dict(audit.nulls),
            "deterministic": diff == 0.0, "repeat_max_abs_diff": diff,
            "input_bytes": sum(t.numel() * t.element_size() for t in tensors_in),
            "output_bytes": sum(t.numel() * t.element_size() for t in raw),
            "param_bytes": sum(t.numel() * t.element_size()
                               for t in [*model.parameters(), *model.buffers()]),
            "flops": flops if flops > 0 else None,
            "single_float32": single,
            "output_mean": float(outs[0][0].mean()) if single and outs[0][0].numel() else None,
            "identity_input": identity,
        }
    except Exception as exc:  # noqa: BLE001 - user benchmark code: every failure is a reason in the row
        facts = {"ok": False, "reason": failure_reason(exc),
                 "error": f"{type(exc).__name__}: {str(exc)[:300]}"}
    finally:
        if device.startswith("cuda"):
            import torch

            torch.cuda.empty_cache()
    facts["probe_s"] = round(time.monotonic() - started, 3)
    return facts


def _repeat_diff(again: Any, first: Any) -> float:
    """The largest difference between two calls' outputs on the same inputs; a NaN or an infinity that
    the second call repeats where the first had it is none (NaN - NaN is NaN, and so is inf - inf: a
    reference that returns one was called nondeterministic)."""
    diff = (again - first).abs_()
    worst = float(diff.max())  # NaN where any place differs by NaN: only then the masks (full-size outputs)
    if not math.isnan(worst):
        return worst
    same = (again == first) | (again.isnan() & first.isnan())
    return float(diff.masked_fill_(same, 0.0).max())


def _serve(conn: Connection) -> None:
    """The child's loop: (problem, device, cfg) in, facts out, until None or the pipe closes."""
    while True:
        try:
            job = conn.recv()
        except EOFError:
            return
        if job is None:
            return
        with contextlib.redirect_stdout(io.StringIO()):  # what a reference prints is not our output
            facts = probe_reference(*job)
        conn.send(facts)


class ProbeWorker:
    """One child process probing references one at a time; replaced after a timeout or a crash."""

    def __init__(self) -> None:
        self._ctx = multiprocessing.get_context("spawn")  # no fork of a process holding the judge's threads
        self._proc: BaseProcess | None = None
        self._conn: Connection | None = None

    def _start(self) -> tuple[BaseProcess, Connection]:
        if self._proc is None or self._conn is None or not self._proc.is_alive():
            self.close()
            parent, child = self._ctx.Pipe()
            self._proc = self._ctx.Process(target=_serve, args=(child,), daemon=True, name="drkernel-probe")
            self._proc.start()
            child.close()
            self._conn = parent
        return self._proc, self._conn

    def probe(self, problem: Problem, device: str, cfg: AuditConfig, timeout_s: float) -> dict[str, Any]:
        """The facts of one reference, or {"ok": False, "reason": "timeout" | "crash", ...}."""
        started = time.monotonic()
        proc, conn = self._start()
        try:
            conn.send((problem, device, cfg))
            if conn.poll(max(timeout_s, 0.1)):
                facts: dict[str, Any] = conn.recv()
                return facts
            reason, error = "timeout", f"the reference did not finish within {timeout_s:.0f} s"
        except (EOFError, OSError):
            proc.join(5)
            reason, error = "crash", f"the probe process died (exit code {proc.exitcode})"
        self.close()
        return {"ok": False, "reason": reason, "error": error,
                "probe_s": round(time.monotonic() - started, 3)}

    def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(OSError):
                self._conn.send(None)
            self._conn.close()
            self._conn = None
        if self._proc is not None:
            self._proc.join(1)
            if self._proc.is_alive():
                self._proc.kill()
                self._proc.join(5)
            self._proc = None
