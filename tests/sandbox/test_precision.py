"""The fp32 criterion: TF32-level error passes, a bf16 downcast and a wrong region fail.

The candidate rounds its inputs to a 10-bit (TF32) or 7-bit (bf16) mantissa inside its Triton
kernel, then takes an IEEE dot, as a TF32 matmul unit does. The paper preset keeps the authors'
allclose(atol=rtol=1e-2), which rejects TF32 matmuls at these K.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from drkernel.sandbox.comparison import compare_outputs
from drkernel.sandbox.judge import Judge
from drkernel.types import EvalOptions, EvalOutcome, EvalRequest
from tests.sandbox.corpus import FAST

REFERENCE = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, A, B):
        return torch.matmul(A, B)


M = 32
K = {K}
N = 32


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, N)]


def get_init_inputs():
    return []
'''

KERNEL = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def rounded_matmul(a_ptr, b_ptr, c_ptr, M, N, K, DROP: tl.constexpr, KEEP: tl.constexpr,
                   BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * K + (k0 + rk[None, :]))
        b = tl.load(b_ptr + (k0 + rk[:, None]) * N + rn[None, :])
        if DROP > 0:  # round to nearest even on the kept mantissa bits
            ai = a.to(tl.int32, bitcast=True)
            bi = b.to(tl.int32, bitcast=True)
            ai = (ai + ((ai >> DROP) & 1) + ((1 << (DROP - 1)) - 1)) & KEEP
            bi = (bi + ((bi >> DROP) & 1) + ((1 << (DROP - 1)) - 1)) & KEEP
            a = ai.to(tl.float32, bitcast=True)
            b = bi.to(tl.float32, bitcast=True)
        acc += tl.dot(a, b, input_precision="ieee")
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc)


class ModelNew(nn.Module):
    def forward(self, A, B):
        M, K = A.shape
        N = B.shape[1]
        C = torch.empty((M, N), device=A.device, dtype=torch.float32)
        rounded_matmul[(M // 32, N // 32)](A.contiguous(), B.contiguous(), C, M, N, K,
                                           DROP={DROP}, KEEP={KEEP}, BM=32, BN=32, BK=256)
        return C
'''


def kernel(mantissa_bits: int) -> str:
    drop = 23 - mantissa_bits
    return KERNEL.replace("{DROP}", str(drop)).replace("{KEEP}", str(-(1 << drop) if drop else -1))


@pytest.fixture(scope="module")
def judge() -> Iterator[Judge]:
    with Judge(device="cpu", cache_path=None, spares=1) as j:
        yield j


def judged(judge: Judge, k: int, bits: int, options: EvalOptions = FAST) -> tuple[EvalOutcome, float]:
    r = judge.evaluate(EvalRequest(reference_code=REFERENCE.replace("{K}", str(k)), kernel_code=kernel(bits),
                                   options=options.replace(num_correct_trials=2, timeout_s=300.0)))
    worst = max((t.rel_l2 or 0.0) for t in r.trials) if r.trials else float("nan")
    return r.outcome, worst


@pytest.mark.parametrize("k", [4096, 16384])
def test_tf32_rounded_inputs_pass_up_to_k_16384(judge: Judge, k: int) -> None:
    outcome, rel = judged(judge, k, 10)
    assert outcome is EvalOutcome.OK
    assert 1e-4 < rel < 1e-3  # it did round: TF32 sits near 3e-4


def test_bf16_rounded_inputs_fail(judge: Judge) -> None:
    outcome, rel = judged(judge, 4096, 7)
    assert outcome is EvalOutcome.INCORRECT
    assert rel > 1e-3


def test_the_paper_preset_keeps_allclose_1e_2_which_rejects_tf32(judge: Judge) -> None:
    paper = EvalOptions.paper().replace(num_perf_trials=3, num_warmup=1, seed=None)
    outcome, _ = judged(judge, 16384, 10, paper)
    assert outcome is EvalOutcome.INCORRECT


def _matmul(k: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(64, k, generator=g), torch.randn(k, 64, generator=g)


def _compare(ref: torch.Tensor, out: torch.Tensor, relative: bool = True) -> tuple[bool, str | None]:
    c = compare_outputs({"t": 0}, [ref], {"t": 0}, [out], None, None, relative)
    return c.passed, c.issue


def test_a_region_wrong_by_ten_percent_fails() -> None:
    a, b = _matmul(4096)
    ref = a @ b
    out = ref.clone().reshape(-1)
    out[: out.numel() // 100] *= 1.1  # 1 % of the elements off by 10 %
    passed, issue = _compare(ref, out.reshape(ref.shape))
    assert not passed and issue is not None


def test_a_few_elements_far_off_fail_even_when_the_global_error_is_small() -> None:
    a, b = _matmul(4096)
    ref = a @ b
    out = ref.clone()
    out[3, 5] += 0.5 * float(ref.abs().max())  # one element, off by half the output's largest value
    passed, issue = _compare(ref, out)
    assert not passed and "elements outside" in (issue or "")
