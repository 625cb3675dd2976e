"""Timed outputs of large problems are verified on random blocks of elements.

The blocks are drawn after the candidate has written its whole output file, so a candidate cannot
know which elements will be checked: outputs that are wrong in part, or shaped differently, are
still caught, and honest ones still pass. Outputs here are 131,072 elements, above the size
(65,536) from which `tensorfile.sample_plan` samples instead of reading whole.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from drkernel.sandbox import comparator
from drkernel.sandbox.judge import Judge
from drkernel.types import EvalOutcome, EvalRequest, EvalResult
from tests.sandbox.corpus import FAST, asset, reference_code

BIG = reference_code("relu_scale").replace("batch_size = 8", "batch_size = 512")  # 512 x 256

_KERNEL = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, tl.maximum(x, 0.0) * 2.0 + 1.0, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        x = x.contiguous()
        out = torch.zeros_like(x)
        n = x.numel() if self.calls <= CHEAT_AFTER else WORK
        relu_scale_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
        return SHAPE(out)
'''

# with 2 correctness trials: correctness (2 calls), launch modes (4) and warm-up (1) come before the timed calls
HONEST = _KERNEL.replace("CHEAT_AFTER", "10**9").replace("WORK", "x.numel()").replace("SHAPE(out)", "out")
# computes a random-looking 90 % of the output in timed calls only: the last tenth stays zero
PARTIAL = _KERNEL.replace("CHEAT_AFTER", "7").replace("WORK", "x.numel() * 9 // 10").replace("SHAPE(out)", "out")
# right values, wrong shape in timed calls (a flattened output)
RESHAPED = _KERNEL.replace("CHEAT_AFTER", "10**9").replace("WORK", "x.numel()").replace(
    "SHAPE(out)", "out if self.calls <= 7 else out.reshape(-1)")


@pytest.fixture(scope="module")
def judge() -> Iterator[Judge]:
    with Judge(device="cpu", cache_path=None, spares=1) as j:
        yield j


@pytest.fixture()
def plans_read(monkeypatch: pytest.MonkeyPatch) -> list[list[object]]:
    """Records the plans the judge reads candidate files with (None: the whole tensor)."""
    seen: list[list[object]] = []
    original = comparator.read_entries

    def spy(path, entries, plans, device="cpu", staging=None):  # type: ignore[no-untyped-def]
        seen.append(list(plans))
        return original(path, entries, plans, device, staging)

    monkeypatch.setattr(comparator, "read_entries", spy)
    return seen


def evaluate(judge: Judge, code: str) -> EvalResult:
    return judge.evaluate(EvalRequest(reference_code=BIG, kernel_code=code, options=FAST.replace(num_correct_trials=2)))


def test_honest_large_output_passes_on_sampled_blocks(judge: Judge, plans_read: list[list[object]]) -> None:
    r = evaluate(judge, HONEST)
    assert r.outcome is EvalOutcome.OK, (r.outcome, r.hack_details, r.error)
    assert plans_read and all(p is not None for plans in plans_read for p in plans)  # sampled, not whole


def test_output_wrong_in_part_during_timed_calls_is_caught(judge: Judge, plans_read: list[list[object]]) -> None:
    r = evaluate(judge, PARTIAL)
    assert r.outcome is EvalOutcome.HACK_DETECTED and "replayed_output" in r.hacks, (r.outcome, r.hack_details)
    assert plans_read


def test_output_of_another_shape_during_timed_calls_is_caught(judge: Judge) -> None:
    r = evaluate(judge, RESHAPED)
    assert r.outcome is EvalOutcome.HACK_DETECTED and "replayed_output" in r.hacks, (r.outcome, r.hack_details)
    assert "shape" in r.hack_details["replayed_output"]


def test_small_outputs_are_still_compared_whole(judge: Judge, plans_read: list[list[object]]) -> None:
    honest = asset("kernels", "relu_scale")
    r = judge.evaluate(EvalRequest(reference_code=honest.reference, kernel_code=honest.code, options=FAST))
    assert r.outcome is EvalOutcome.OK
    assert plans_read and all(p is None for plans in plans_read for p in plans)
