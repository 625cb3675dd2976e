"""`drkernel eval` starts the fork server (and on a GPU the comparison child) before it imports torch, and
the judge adopts them (issue 14)."""

from __future__ import annotations

import pytest

from drkernel.errors import ConfigError
from drkernel.sandbox import cli as eval_cli
from drkernel.sandbox.comparator import LocalComparator, ProcessComparator, make_comparator
from drkernel.sandbox.judge import Judge
from drkernel.sandbox.plumbing.process import ComparisonProcess, Zygote
from drkernel.types import EvalRequest

REF = """
import torch
import torch.nn as nn
class Model(nn.Module):
    def forward(self, x):
        return x * 2
def get_inputs():
    return [torch.randn(64)]
def get_init_inputs():
    return []
"""

KERNEL = """
import torch
import torch.nn as nn
import triton
import triton.language as tl

@triton.jit
def twice(x_ptr, o_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(o_ptr + offs, tl.load(x_ptr + offs, mask=m) * 2, mask=m)

class ModelNew(nn.Module):
    def forward(self, x):
        o = torch.empty_like(x)
        twice[(triton.cdiv(x.numel(), 64),)](x, o, x.numel(), BLOCK=64)
        return o
"""


def test_a_fork_server_knows_which_device_it_serves():
    zygote = Zygote("cpu")
    try:
        assert zygote.serves("cpu")
        assert not zygote.serves("cuda:0")  # its sandboxes see no GPU
    finally:
        zygote.close()
    assert not zygote.serves("cpu")  # a closed one serves nothing


def test_the_judge_adopts_a_prestarted_fork_server_and_judges_with_it():
    zygote, comparison = eval_cli._prestart("cpu")
    assert zygote is not None and comparison is None  # a CPU judge compares in its own process
    with Judge(device="cpu", spares=1, cache_path=None, insecure=True, zygote=zygote) as judge:
        assert judge._zygote is zygote
        result = judge.evaluate(EvalRequest(reference_code=REF, kernel_code=KERNEL))
        assert result.outcome.value == "ok", result.error
    assert not zygote.alive()  # closed with the judge that owned it


def test_a_judge_that_cannot_start_closes_the_fork_server_it_was_given():
    zygote = Zygote("cpu")
    with pytest.raises(ConfigError, match="unknown device"):
        Judge(device="tpu", cache_path=None, insecure=True, zygote=zygote)
    assert not zygote.alive()


def test_prestart_leaves_a_misspelt_device_to_the_judge():
    assert eval_cli._prestart("tpu:0") == (None, None)


def test_a_prestarted_comparison_child_is_adopted_for_its_device_and_closed_otherwise():
    """`drkernel eval` starts a GPU judge's comparison child before importing torch; the comparator
    takes it over where it was started for the judge's device (here a CPU child, which serves the same)."""
    child = ComparisonProcess("cpu")
    comparator = ProcessComparator("cpu", None, child)
    try:
        assert comparator._child is child and child.proc.poll() is None
    finally:
        comparator.close()
    assert child.proc.poll() is not None
    other = ComparisonProcess("cuda:1")
    assert isinstance(make_comparator("cpu", other), LocalComparator)
    assert other.proc.poll() is not None  # started for another device: closed, not leaked


def test_a_judge_that_cannot_start_closes_the_comparison_child_it_was_given():
    child = ComparisonProcess("cpu")
    with pytest.raises(ConfigError, match="unknown device"):
        Judge(device="tpu", cache_path=None, insecure=True, comparison=child)
    assert child.proc.poll() is not None
