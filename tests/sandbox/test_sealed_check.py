"""The sealed span's output check (sandbox/sealedwork.check), on the CPU: the reference holds both the
outputs taken out of the region and its own of the same inputs, and compares them directly. What it
answers, per output, is [||taken - own||, ||own||], which stages/sealed.py holds to the timed windows'
tolerance; -1 where the NaN and Inf entries differ. Every number must be finite (the wire refuses
others), whatever a hostile candidate wrote into the region."""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from drkernel.sandbox.inside import sealedwork
from drkernel.sandbox.stages.timing import output_tolerance
from drkernel.sandbox.wire import protocol as P


class _Box:
    """The parts of a reference's sandbox that check() uses: the forward doubles its input."""

    cuda = False

    def __init__(self, staged: list[torch.Tensor], taken: list[list[torch.Tensor]]) -> None:
        self._span = SimpleNamespace(staged=[[x] for x in staged], taken=taken)

    def _forward(self, inputs: list[Any]) -> Any:
        x = inputs[0]
        return x * 2 if x.dtype != torch.bool else ~x


def _check(staged: list[torch.Tensor], taken: list[torch.Tensor]) -> P.SealedCheckReply:
    box = _Box(staged, [[t] for t in taken])
    calls = list(range(len(taken)))
    reply = sealedwork.check(box, P.SealedCheck(calls=calls))  # type: ignore[arg-type]
    assert box._span.taken == [], "the taken outputs are let go once checked"
    assert P.SealedCheckReply.from_wire(reply.to_wire()) == reply  # what the wire carries back
    return reply


def _passes(reply: P.SealedCheckReply, call: int = 0) -> bool:
    diff, norm = reply.diffs[call][0]
    return 0.0 <= diff <= output_tolerance(reply.dtypes[0], 0.0, norm)


def test_honest_outputs_pass_and_a_wrong_call_among_many_is_found() -> None:
    xs = [torch.randn(4096) for _ in range(8)]
    honest = _check(xs, [x * 2 for x in xs])
    assert honest.dtypes == ["torch.float32"] and len(honest.diffs) == 8
    assert all(_passes(honest, c) for c in range(8))
    taken = [x * 2 for x in xs]
    taken[5] = taken[5].clone()
    taken[5][:40] = 0.0  # one call of eight, one percent of its entries skipped
    wrong = _check(xs, taken)
    assert [c for c in range(8) if not _passes(wrong, c)] == [5]


def test_outputs_of_earlier_inputs_do_not_pass() -> None:
    xs = [torch.randn(1024) for _ in range(3)]
    reply = _check(xs, [xs[0] * 2] * 3)  # the first call's output replayed for every call
    assert [_passes(reply, c) for c in range(3)] == [True, False, False]


def test_nan_and_inf_must_sit_where_the_references_do() -> None:
    x = torch.randn(1000)
    x[3], x[7] = float("nan"), float("inf")
    same = _check([x], [x * 2])
    assert _passes(same) and math.isfinite(same.diffs[0][0][1])
    moved = (x * 2).clone()
    moved[3], moved[4] = 0.0, float("nan")
    assert _check([x], [moved]).diffs[0][0] == [-1.0, 0.0]
    sign = (x * 2).clone()
    sign[7] = float("-inf")
    assert _check([x], [sign]).diffs[0][0] == [-1.0, 0.0]
    nan_everywhere = torch.full_like(x, float("nan"))
    assert _check([x], [nan_everywhere]).diffs[0][0] == [-1.0, 0.0]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_huge_finite_values_give_finite_norms(dtype: torch.dtype) -> None:
    """A float16 norm overflows at 65504, a float64 one at 1e154 an entry: the check widens or scales,
    so a hostile output of huge values is a wrong answer, never a reply the wire refuses."""
    big = {torch.float16: 3e4, torch.bfloat16: 1e30, torch.float64: 1e200}[dtype]
    x = torch.full((2048,), big / 2, dtype=dtype)
    ok = _check([x], [x * 2])
    assert ok.dtypes == [str(dtype)] and _passes(ok)
    off = (x * 2).clone()
    off[:1024] = -off[:1024]
    bad = _check([x], [off])
    assert all(math.isfinite(v) for v in bad.diffs[0][0]) and not _passes(bad)


def test_integer_and_bool_outputs_are_compared_exactly() -> None:
    i = torch.arange(1 << 20, dtype=torch.int64) * 4097
    assert _passes(_check([i], [i * 2]))
    one_off = i * 2
    one_off[12345] += 1
    assert not _passes(_check([i], [one_off]))
    b = torch.rand(1000) > 0.5
    assert _passes(_check([b], [~b]))
    assert not _passes(_check([b], [b]))


def test_a_check_with_nothing_taken_is_the_judges_error_not_a_pass() -> None:
    box = _Box([torch.zeros(4)], [])
    with pytest.raises(RuntimeError, match="no outputs taken"):
        sealedwork.check(box, P.SealedCheck(calls=[0]))  # type: ignore[arg-type]


def test_only_the_drawn_calls_are_checked_in_the_order_drawn() -> None:
    """The judge draws the calls to check after the take (stages/sealed.CHECKED_CALLS): the reference
    answers those, in that order, and runs its forward for no other."""
    xs = [torch.randn(512) for _ in range(6)]
    taken = [[x * 2] for x in xs]
    taken[4] = [xs[4] * 3]  # call 4 wrong
    box = _Box(xs, taken)
    seen: list[int] = []
    forward = box._forward

    def counted(inputs: list[Any]) -> Any:
        seen.append(next(i for i, x in enumerate(xs) if x is inputs[0]))
        return forward(inputs)

    box._forward = counted  # type: ignore[method-assign]
    reply = sealedwork.check(box, P.SealedCheck(calls=[4, 1]))  # type: ignore[arg-type]
    assert len(reply.diffs) == 2 and seen == [4, 1]
    assert not _passes(reply, 0) and _passes(reply, 1)


@pytest.mark.parametrize("calls", [[], [0, 0], [6], [-1]])
def test_calls_to_check_must_be_distinct_calls_of_the_span(calls: list[int]) -> None:
    xs = [torch.randn(8) for _ in range(6)]
    box = _Box(xs, [[x * 2] for x in xs])
    with pytest.raises(ValueError, match="not distinct calls"):
        sealedwork.check(box, P.SealedCheck(calls=calls))  # type: ignore[arg-type]
