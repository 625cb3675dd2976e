"""A sealed judge (issue 32, item 1): the candidate's process is native code from its first line. The
test-only switch `EvalOptions(static_policy=False)` lets a submission run any Python from import, as
if the gate were passed; each takeover below rewrites the sandbox's own harness. What holds is
asserted; what is open is a strict xfail naming the figure that is still measured inside the
candidate's process (docs/errors.md, "What is still on the candidate's word"): it turns into a
failure the day the judge stops believing it, and must then become a plain test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from drkernel.sandbox.judge import Judge
from drkernel.types import EvalOutcome, EvalRequest
from tests.sandbox.corpus import ASSETS, FAST, reference_code

OPTIONS = FAST.replace(static_policy=False)


@pytest.fixture(scope="module")
def judge() -> Iterator[Judge]:
    with Judge(device="cpu", cache_path=None, spares=1) as j:
        yield j


def run(judge: Judge, name: str):  # noqa: ANN201
    code = (ASSETS / "attacks" / f"{name}.py").read_text()
    return judge.evaluate(EvalRequest(reference_code=reference_code("relu_scale"), kernel_code=code,
                                      options=OPTIONS))


def test_forged_checksums_of_the_timed_outputs_are_caught(judge: Judge) -> None:
    """Holds: outputs under timing are checked outside the sandbox, on calls it cannot know."""
    r = run(judge, "checksum_forgery")
    assert r.outcome is EvalOutcome.HACK_DETECTED and "replayed_output" in r.hacks, (r.outcome, r.hacks)
    assert r.reward == 0.0


@pytest.mark.xfail(strict=True, reason="OPEN: where a kernel's timed windows are small beside the input "
                   "fills and checksums of the same op, the judge's clock cannot tell a forged window time "
                   "(docs/errors.md); at 512 x 256 it can: test_timed_checksums.py")
def test_forged_window_times_of_a_small_kernel_earn_nothing(judge: Judge) -> None:
    """harness_takeover.py reports a hundredth of each window's time, on an 8 x 256 problem."""
    r = run(judge, "harness_takeover")
    assert r.outcome is not EvalOutcome.OK, (r.outcome, r.hacks, r.speedup)


@pytest.mark.xfail(strict=True, reason="OPEN: launches and coverage are measured inside the candidate's "
                   "process; no outside observer names the kernels the device ran (docs/errors.md)")
def test_no_kernel_with_a_forged_launch_record_earns_nothing(judge: Judge) -> None:
    r = run(judge, "no_kernel_takeover")
    assert r.outcome is not EvalOutcome.OK and r.reward == 0.0, (r.outcome, r.hacks)
