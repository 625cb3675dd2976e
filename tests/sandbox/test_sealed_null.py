"""The sealed span's nulls and charge (sandbox/inside/sealedwork.py, sandbox/stages/sealed.py), on the CPU. A
work null fill and a non-keeping take do the real fill's and take's device work, so that what a span's
fill and take took beyond them is charged to its gap; the null puts no input of the coming span in the
candidate's reach (its copies rotate the last span's inputs among the calls' slots, or, with one call,
go to the reference's scratch); a bare null moves nothing. The check keeps one
call's own outputs alive at a time and answers as it did when it kept them all."""

from __future__ import annotations

import doctest
import math
import weakref
from typing import Any

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from drkernel.sandbox.inside import sealedwork
from drkernel.sandbox.stages import sealed
from drkernel.sandbox.stages.sealed import EXCESS_SLACK, _charged
from drkernel.sandbox.wire import protocol as P
from drkernel.sandbox.wire.sharedmem import ALIGN, Region, layout

CALLS = 3


class _Ref:
    """The parts of a reference's sandbox that fill, take and check use, over a real CPU region: two
    tensor inputs of different sizes and a number; the forward gives two outputs."""

    cuda = False

    def __init__(self, calls: int = CALLS) -> None:
        self.made: list[weakref.ref[torch.Tensor]] = []  # every output the forward made
        self.alive_at_forward: list[int] = []  # how many of them were alive as each forward began
        inputs = self._fresh_inputs(0)
        entries, size = layout(calls, inputs, list(_Ref._forward(self, inputs)))
        self._span = sealedwork._Span(Region.create("cpu", size), entries)
        self._span.staged = [self._fresh_inputs(s) for s in range(1, calls + 1)]

    def _fresh_inputs(self, seed: int) -> list[Any]:
        g = torch.Generator().manual_seed(seed)
        return [torch.randn(64, 32, generator=g), 3, torch.randn(32, generator=g)]

    def _forward(self, inputs: list[Any]) -> tuple[torch.Tensor, torch.Tensor]:
        return inputs[0] * inputs[1] + inputs[2], inputs[0].sum(0)

    def _sync(self) -> None:
        pass


class _Moves(TorchDispatchMode):
    """The ops that move bytes, as (op, bytes, dtype) of what they write."""

    def __init__(self) -> None:
        super().__init__()
        self.moved: list[tuple[str, int, torch.dtype]] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        name = func.overloadpacket.__name__
        if name in ("copy_", "fill_", "clone"):
            written = args[0] if name != "clone" else out
            self.moved.append((name, written.numel() * written.element_size(), written.dtype))
        return out


def _inputs_and_outputs(span: Any) -> list[torch.Tensor]:
    return [t.clone() for ins in span.ins for t in ins.values()] + [t.clone() for o in span.outs for t in o]


def test_the_charge_is_the_excess_over_the_nulls_beyond_the_slack_and_never_negative() -> None:
    assert doctest.testmod(sealed).failed == 0
    assert _charged(10.0, 2.0, 3.0, 2.0, 3.0) == 10.0  # as long as the nulls: nothing charged
    assert _charged(10.0, 0.5, 0.1, 2.0, 3.0) == 10.0  # shorter than the nulls: never below the gap
    within = 1.0 + EXCESS_SLACK
    assert _charged(10.0, 2.0 * within, 3.0 * within, 2.0, 3.0) == pytest.approx(10.0)
    assert _charged(10.0, 2.0, 3.0 * within + 4.0, 2.0, 3.0) == pytest.approx(14.0)  # a take held up
    assert _charged(10.0, 2.0 * within + 1.5, 3.0 * within + 4.0, 2.0, 3.0) == pytest.approx(15.5)
    assert _charged(0.1, 0.0, 7.0, 0.0, 0.0) == pytest.approx(7.1)  # no null work: all of it counts
    assert _charged(10.0, 2.0, 3.0 + 0.3, 2.0, 3.0, min_ms=0.5) == 10.0  # within the least let pass
    assert _charged(10.0, 2.0, 3.0 + 1.5, 2.0, 3.0, min_ms=0.5) == pytest.approx(11.0)


@pytest.mark.parametrize("calls", [CALLS, 1])
def test_a_work_null_fill_moves_what_a_real_fill_moves_and_puts_no_coming_input_in_reach(calls: int) -> None:
    box = _Ref(calls)
    span = box._span
    for c, ins in enumerate(span.ins):  # the last span's inputs, one value a call
        for t in ins.values():
            t.fill_(float(c))
    with _Moves() as null_moves:
        null = sealedwork.fill(box, P.SealedFill(null=True))  # type: ignore[arg-type]
    for c, ins in enumerate(span.ins):
        for i, t in ins.items():
            # the next slot's, as it was then (the last slot's next is the first, which holds the second's)
            want = 0.0 if calls == 1 else float(c + 1 if c < calls - 1 else 1)
            assert bool((t == want).all())  # the last span's inputs moved among the slots (one call: kept)
            assert not torch.equal(t, span.staged[c][i])
    assert all(bool((t.view(torch.uint8) == 0xFF).all()) for o in span.outs for t in o)  # poisoned
    scratch = span.scratch
    if calls == 1:  # the staged inputs went to the scratch, laid out as the call's: 8 KiB and 128 B
        assert scratch is not None and scratch.numel() == 64 * 32 * 4 + 256
        assert torch.equal(scratch[:64 * 32 * 4].view(torch.float32).view(64, 32), span.staged[0][0])
    else:
        assert scratch is None
    with _Moves() as real_moves:
        real = sealedwork.fill(box, P.SealedFill(null=False))  # type: ignore[arg-type]
    # one poisoning of every output at once, then the inputs' copies (two a call)
    assert null_moves.moved == real_moves.moved and len(real_moves.moved) == 1 + calls * 2, real_moves.moved
    assert real_moves.moved[0][0] == "fill_"
    assert null.fill_ms > 0.0 and real.fill_ms > 0.0
    for ins, staged in zip(span.ins, span.staged, strict=True):
        assert all(torch.equal(t, staged[i]) for i, t in ins.items())
    sealedwork.fill(box, P.SealedFill(null=True))  # type: ignore[arg-type]
    assert span.scratch is scratch


def test_a_take_always_copies_the_outputs_out_and_keeps_them_only_when_asked() -> None:
    box = _Ref()
    span = box._span
    for staged, outs in zip(span.staged, span.outs, strict=True):
        for d, o in zip(outs, box._forward(staged), strict=True):
            d.copy_(o)
    with _Moves() as moves:
        dropped = sealedwork.take(box, P.SealedTake(keep=False))  # type: ignore[arg-type]
    assert dropped.take_ms > 0.0 and span.taken == []
    # one copy of every output's bytes (launched one output at a time, the take left the device idle
    # between launches, where an early answer's work ran unseen: run BL)
    assert [m[0] for m in moves.moved] == ["clone"]
    outs = sum(-(-t.nbytes // ALIGN) * ALIGN for o in span.outs for t in o)
    assert sum(t.nbytes for o in span.outs for t in o) <= moves.moved[0][1] <= outs
    kept = sealedwork.take(box, P.SealedTake(keep=True))  # type: ignore[arg-type]
    assert kept.take_ms > 0.0 and kept.taken_at >= dropped.taken_at
    assert [[torch.equal(a, b) and a.data_ptr() != b.data_ptr() for a, b in zip(got, o, strict=True)]
            for got, o in zip(span.taken, span.outs, strict=True)] == [[True, True]] * CALLS


def test_a_bare_null_moves_nothing_and_a_bare_fill_or_take_is_a_nulls_only() -> None:
    box = _Ref()
    before = _inputs_and_outputs(box._span)
    with _Moves() as moves:
        filled = sealedwork.fill(box, P.SealedFill(null=True, bare=True))  # type: ignore[arg-type]
        taken = sealedwork.take(box, P.SealedTake(keep=False, bare=True))  # type: ignore[arg-type]
    assert filled.fill_ms == 0.0 and taken.take_ms == 0.0 and taken.taken_at >= filled.filled_at
    assert moves.moved == [] and box._span.scratch is None and box._span.taken == []
    assert all(torch.equal(a, b) for a, b in zip(before, _inputs_and_outputs(box._span), strict=True))
    with pytest.raises(ValueError, match="bare fill"):
        sealedwork.fill(box, P.SealedFill(null=False, bare=True))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="bare take"):
        sealedwork.take(box, P.SealedTake(keep=True, bare=True))  # type: ignore[arg-type]


class _Counted(_Ref):
    def _forward(self, inputs: list[Any]) -> tuple[torch.Tensor, torch.Tensor]:
        self.alive_at_forward.append(sum(r() is not None for r in self.made))
        outs = super()._forward(inputs)
        self.made += [weakref.ref(t) for t in outs]
        return outs


def _expected(got: torch.Tensor, own: torch.Tensor) -> list[float]:
    """[||got - own||, ||own||] written out; where an output is not finite, over its finite entries,
    scaled by their largest magnitude above 1, and [-1, 0] unless its NaN and Inf entries agree."""
    bad = ~torch.isfinite(own)
    if not bad.any() and torch.isfinite(got).all():
        return [float((got - own).double().norm()), float(own.double().norm())]
    same = torch.equal(got[bad].nan_to_num(0.0, 1.0, -1.0), own[bad].nan_to_num(0.0, 1.0, -1.0))
    if not torch.equal(bad, ~torch.isfinite(got)) or not same:
        return [-1.0, 0.0]
    g, w = got[~bad].double(), own[~bad].double()
    scale = max(1.0, float(torch.cat([g.abs(), w.abs()]).max()))
    return [float((g - w).norm()) / scale, float(w.norm()) / scale]


def test_the_check_answers_as_before_with_one_calls_own_outputs_alive_at_a_time() -> None:
    box = _Counted()
    span = box._span
    span.staged[1][0][5, 3] = float("nan")  # call 1: the reference's own outputs hold a NaN
    span.staged[2][0][9, 1] = float("inf")  # call 2: so do the taken, but elsewhere
    own = [_Ref._forward(box, x) for x in span.staged]  # not counted: the test's own
    taken = [[t.clone() for t in outs] for outs in own]
    taken[0][0][0, 0] += 0.5  # call 0: one entry off
    taken[2][0][9, 1], taken[2][0][0, 2] = 0.0, float("inf")
    span.taken = taken
    reply = sealedwork.check(box, P.SealedCheck(calls=list(range(CALLS))))  # type: ignore[arg-type]
    want = [[_expected(g, w) for g, w in zip(got, mine, strict=True)]
            for got, mine in zip(taken, own, strict=True)]
    assert len(reply.diffs) == CALLS and reply.dtypes == ["torch.float32"] * 2
    for c in range(CALLS):
        for leaf in range(2):
            assert reply.diffs[c][leaf] == pytest.approx(want[c][leaf], rel=1e-5, abs=1e-6), (c, leaf)
    assert reply.diffs[0][0][0] == pytest.approx(0.5, rel=1e-5) and reply.diffs[2][0] == [-1.0, 0.0]
    assert math.isfinite(reply.diffs[1][0][1]) and reply.diffs[1][0][0] < 1e-5  # NaN where the reference's
    assert box.alive_at_forward == [0] * (CALLS + 2), box.alive_at_forward  # calls 1 and 2 made again
    assert P.SealedCheckReply.from_wire(reply.to_wire()) == reply
