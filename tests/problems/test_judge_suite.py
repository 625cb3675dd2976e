"""Proof: every built-in solution is judged correct, with no hack flagged, by the real judge on the
CPU (Triton interpreter), on several seeds and on its held-out shape variants."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from drkernel.problems.suite import builtin_names, builtin_problem, builtin_solution
from drkernel.sandbox.judge import Judge
from drkernel.types import EvalOptions, EvalOutcome, EvalRequest

OPTIONS = EvalOptions(num_correct_trials=3, num_perf_trials=1, num_warmup=0, profile=False)


@pytest.fixture(scope="module")
def judge() -> Iterator[Judge]:
    with Judge(device="cpu") as j:
        yield j


@pytest.mark.parametrize("name", builtin_names())
def test_builtin_solution_is_judged_correct(judge: Judge, name: str) -> None:
    problem = builtin_problem(name, "cpu")
    request = EvalRequest(reference_code=problem.reference_code, kernel_code=builtin_solution(name),
                          options=OPTIONS, problem_name=name, shape_variants=problem.shape_variants)
    result = judge.evaluate(request)
    detail = result.error.message if result.error else result.trials
    assert result.outcome is EvalOutcome.OK, (result.outcome, result.hacks, result.hack_details, detail)
    assert result.correct and result.hacks == []
    assert result.shape_variants_total == len(problem.shape_variants) >= 2
    assert result.shape_variants_passed == result.shape_variants_total
    assert all(t.passed for t in result.trials) and len(result.trials) == 3
    assert result.warnings == []  # no built-in reference ignores its inputs
