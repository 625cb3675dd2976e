"""The authors' timing beside the judge's own (issue 35, part A, item 3; `--protocol paper`).

`EvalOptions(paper_timing=True)`: warm-up calls, then 10 calls each timed alone on one set of inputs,
each side's mean rounded to 3 significant digits, the speedup their exact quotient. The reference's
is taken before the candidate loads and cached; the verdict's own times are untouched; a candidate
that forges its paper times under a takeover is caught by the sealed span's bound. Also the authors'
`avg_difference`: every trial's mean absolute difference."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from drkernel.sandbox.comparison import compare_outputs
from drkernel.sandbox.judge import Judge
from drkernel.sandbox.stages.paper import PAPER_CALLS, round_sig
from drkernel.sandbox.wire.protocol import PaperTimeReply, ProtocolError
from drkernel.types import EvalOutcome, EvalRequest, EvalResult
from tests.sandbox.corpus import ASSETS, FAST, reference_code

PAPER = FAST.replace(paper_timing=True)
HONEST = (ASSETS / "kernels" / "relu_scale.py").read_text()


@pytest.fixture(scope="module")
def judge(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Judge]:
    cache = tmp_path_factory.mktemp("paper") / "timing.sqlite"
    with Judge(device="cpu", cache_path=str(cache), spares=1) as j:
        yield j


def test_round_sig_keeps_three_significant_digits() -> None:
    assert round_sig(0.0012345) == 0.00123
    assert round_sig(123456.0) == 123000.0
    assert round_sig(9.996) == 10.0
    assert round_sig(-0.04567) == -0.0457
    assert round_sig(0.0) == 0.0


def test_a_paper_reply_with_no_times_or_a_negative_one_is_refused() -> None:
    for bad in ([], [1.0, -0.5], [math.nan]):
        with pytest.raises(ProtocolError):
            PaperTimeReply(times_ms=bad)


def test_the_authors_timing_is_reported_beside_the_verdicts_own(judge: Judge) -> None:
    reference = reference_code("relu_scale")
    r = judge.evaluate(EvalRequest(reference_code=reference, kernel_code=HONEST, options=PAPER))
    assert r.outcome is EvalOutcome.OK, (r.outcome, r.hacks, r.error)
    p = r.paper_timing
    assert p is not None and p.calls == PAPER_CALLS == len(p.kernel_times_ms) == len(p.reference_times_ms)
    assert p.warmup == PAPER.num_warmup
    assert p.kernel_ms == round_sig(statistics.fmean(p.kernel_times_ms))
    assert p.reference_ms == round_sig(statistics.fmean(p.reference_times_ms))
    assert p.speedup == p.reference_ms / p.kernel_ms  # the saved fields agree exactly
    assert p.reference_measured_alone is True  # timed before the candidate loaded, and cached
    assert r.kernel_ms is not None and r.kernel_timing is not None  # the verdict's own timing still ran
    assert "paper_timing" in r.stage_s
    again = EvalResult.from_dict(r.to_dict())
    assert again.paper_timing == p

    second = judge.evaluate(EvalRequest(reference_code=reference, kernel_code=HONEST, options=PAPER))
    assert second.paper_timing is not None
    assert second.paper_timing.reference_times_ms == p.reference_times_ms  # from the cache, not re-timed
    assert second.stage_s.get("reference_first", 1.0) < r.stage_s["reference_first"]

    plain = judge.evaluate(EvalRequest(reference_code=reference, kernel_code=HONEST, options=FAST))
    assert plain.outcome is EvalOutcome.OK and plain.paper_timing is None
    assert plain.to_dict()["paper_timing"] is None


def test_forged_paper_times_are_caught_by_the_sealed_span(judge: Judge) -> None:
    code = (ASSETS / "attacks" / "paper_time_forgery.py").read_text()
    r = judge.evaluate(EvalRequest(reference_code=reference_code("relu_scale"), kernel_code=code,
                                   options=PAPER.replace(static_policy=False)))
    assert r.outcome is EvalOutcome.HACK_DETECTED and "timer_mismatch" in r.hacks, (r.outcome, r.hacks)
    assert "paper protocol" in r.hack_details["timer_mismatch"], r.hack_details
    assert r.reward == 0.0


def test_the_same_forgery_without_paper_timing_changes_nothing(judge: Judge) -> None:
    """The forged op is never called unless asked: the honest kernel under it is judged `ok`."""
    code = (ASSETS / "attacks" / "paper_time_forgery.py").read_text()
    r = judge.evaluate(EvalRequest(reference_code=reference_code("relu_scale"), kernel_code=code,
                                   options=FAST.replace(static_policy=False)))
    assert r.outcome is EvalOutcome.OK and r.paper_timing is None, (r.outcome, r.hacks, r.error)


def test_every_trial_reports_the_mean_absolute_difference(judge: Judge) -> None:
    r = judge.evaluate(EvalRequest(reference_code=reference_code("relu_scale"), kernel_code=HONEST,
                                   options=FAST))
    assert r.trials and all(t.mean_abs_diff is not None and t.mean_abs_diff >= 0.0 for t in r.trials)
    assert all(t.mean_abs_diff <= (t.max_abs_diff or 0.0) for t in r.trials)


def test_the_mean_absolute_difference_weighs_every_element_of_every_output() -> None:
    ref = [torch.ones(4), torch.zeros(2, 2)]
    out = [torch.tensor([1.0, 1.0, 1.0, 1.004]), torch.tensor([[0.0, 0.002], [0.0, 0.0]])]
    structure = {"seq": [{"t": 0}, {"t": 1}]}
    c = compare_outputs(structure, ref, structure, out, atol=1e-2, rtol=1e-2, relative=False)
    assert c.passed, c.issue
    assert c.mean_abs_diff == pytest.approx((0.004 + 0.002) / 8, rel=1e-4)
    assert c.max_abs_diff == pytest.approx(0.004, rel=1e-4)


def test_the_judges_own_timing_of_a_plain_request_is_what_it_was(tmp_path: Path) -> None:
    """paper_timing defaults to off, and an old client's options (without it) still parse."""
    from drkernel.types import EvalOptions

    assert EvalOptions().paper_timing is False
    assert EvalOptions.from_dict({"num_correct_trials": 2}).paper_timing is False
    assert EvalOptions.from_dict({"paper_timing": True}).paper_timing is True
