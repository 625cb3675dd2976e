"""The judge's channels to its two helper processes are typed (issue 37, item 4): the comparison
process and the fork server take and answer `helpermsg` classes, checked field by field on both
sides. Here the comparison child itself on the CPU; every judge test starts its sandboxes through the
fork server's typed request (test_attacks_isolation.py: in namespaces)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from drkernel.sandbox.comparator import JudgeFault, ProcessComparator
from drkernel.sandbox.plumbing.process import ComparisonProcess
from drkernel.sandbox.wire.helpermsg import (
    CompareAnswer,
    CompareJob,
    CompareReply,
    ForkAnswer,
    ForkRequest,
    IsolationSpec,
    WorkerArgs,
)
from drkernel.sandbox.wire.protocol import ProtocolError
from drkernel.sandbox.wire.tensorfile import write_tensors


def job(ref: Path, out: Path, **changes: object) -> CompareJob:
    fields: dict[str, object] = dict(ref_path=str(ref), ref_count=1, out_path=str(out), out_count=1,
                                     ref_structure={"t": 0}, out_structure={"t": 0}, atol=None, rtol=None,
                                     relative=True, fingerprint=True, expect=[["torch.float32", [64]]])
    fields.update(changes)
    return CompareJob(**fields)  # type: ignore[arg-type]


def test_the_comparison_process_answers_typed_replies(tmp_path: Path) -> None:
    """A pass, a fail with its figures, an overflowing difference (Inf, a fact the judge measured and
    the wire carries), and the reference's fingerprint, all through the child process."""
    ref, out = tmp_path / "ref", tmp_path / "out"
    x = torch.linspace(-1.0, 1.0, 64)
    write_tensors(str(ref), [x])
    comparator = ProcessComparator("cpu", None, ComparisonProcess("cpu"))
    try:
        write_tensors(str(out), [x + 1e-7])
        good = comparator.compare(job(ref, out))
        assert isinstance(good, CompareReply) and good.passed and good.issue is None
        assert good.fingerprint is not None and len(good.fingerprint) == 64
        assert good.fingerprint[0] == pytest.approx(-1.0)
        write_tensors(str(out), [x + 0.5])
        bad = comparator.compare(job(ref, out, fingerprint=False))
        assert not bad.passed and bad.max_abs_diff == pytest.approx(0.5) and bad.fingerprint is None
        huge = torch.full((64,), 3e38)
        write_tensors(str(ref), [huge])
        write_tensors(str(out), [-huge])  # 6e38 does not fit a float32: the difference is Inf
        inf = comparator.compare(job(ref, out, atol=math.inf, rtol=0.0))
        assert inf.passed is False and inf.max_abs_diff is not None and math.isinf(inf.max_abs_diff), inf
    finally:
        comparator.close()


def test_a_fault_in_the_comparison_process_is_the_judges(tmp_path: Path) -> None:
    ref = tmp_path / "ref"
    write_tensors(str(ref), [torch.ones(64)])
    comparator = ProcessComparator("cpu", "compare", ComparisonProcess("cpu"))  # the debug hook's fault
    try:
        with pytest.raises(JudgeFault, match="injected judge fault"):
            comparator.compare(job(ref, ref))
    finally:
        comparator.close()


def test_every_field_is_checked_on_the_way_in() -> None:
    wire = CompareJob(ref_path="a", ref_count=1, out_path="b", out_count=1, ref_structure=None,
                      out_structure=None, atol=None, rtol=None, relative=True, fingerprint=False).to_wire()
    assert CompareJob.from_wire(json.loads(json.dumps(wire))).out_path == "b"
    for key, value in (("ref_count", "1"), ("relative", 1), ("expect", "x")):
        with pytest.raises(ProtocolError, match=key):
            CompareJob.from_wire(wire | {key: value})
    with pytest.raises(ProtocolError, match="no field 'out_path'"):
        CompareJob.from_wire({k: v for k, v in wire.items() if k != "out_path"})
    with pytest.raises(ProtocolError, match="fingerprint"):  # a fingerprint is finite (NaN written as 0)
        CompareReply.from_wire(CompareReply(passed=True).to_wire() | {"fingerprint": [math.nan]})
    answer = CompareAnswer.from_wire({"result": None, "error": "RuntimeError: boom"})
    assert answer.result is None and answer.error == "RuntimeError: boom"


def test_the_fork_request_round_trips_and_its_worker_arguments_match_the_workers_command_line() -> None:
    args = WorkerArgs(role="candidate", device="cpu", workdir="/w", memory_mb=8192, fraction=0.9, parent=7)
    request = ForkRequest(args=args, env={"PATH": "/usr/bin"}, cwd="/w/home", workdir="/w",
                          output_path="/w/output.log", uid=1234,
                          isolation=IsolationSpec(uid=1234, keep=["/w"], hide=[], expose=["/usr"]))
    again = ForkRequest.from_wire(json.loads(json.dumps(request.to_wire())))
    assert again == request
    # isolation.enter still reads the same keys it always read
    assert set(request.isolation.to_wire()) == {"uid", "keep", "hide", "expose"}  # type: ignore[union-attr]
    # the worker's main() reads argv[3:9] as role, device, workdir, int, float, int
    argv = args.argv()
    assert argv == ["candidate", "cpu", "/w", "8192", "0.9", "7"]
    assert (int(argv[3]), float(argv[4]), int(argv[5])) == (8192, 0.9, 7)
    assert ForkAnswer.from_wire({"pid": 12, "error": None}).pid == 12
    with pytest.raises(ProtocolError):
        ForkAnswer.from_wire({"pid": "12", "error": None})



def test_the_gpu_comparison_childs_warm_up_job_is_well_formed(monkeypatch: pytest.MonkeyPatch) -> None:
    """`_warm` runs only in a GPU judge's comparison child, before its first job: its typed job is
    built and compared here on the CPU (the device sync stubbed), so a GPU run is not the first to
    read it."""
    from drkernel.sandbox import comparator

    seen: list[CompareReply] = []
    real = comparator.compare_job

    def spy(job: CompareJob, device: str) -> CompareReply:
        reply = real(job, device)
        seen.append(reply)
        return reply

    monkeypatch.setattr(comparator, "compare_job", spy)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    comparator._warm("cpu")
    assert len(seen) == 1 and seen[0].passed and seen[0].fingerprint is not None
