"""Observer-aware coverage inflation with the launch count held equal (C7, GPU form of A5): one Triton
launch per call either way. While a profiler records, a Triton kernel does the whole matmul (fp32, as
slow as torch's, so the profiled time is no quarter of the timed one); in timed calls torch does the
matmul and the Triton launch is a copy. The judge's launch-count and profiled-time checks both pass, so
the coverage measured in the profiled window is ~1.0 for work that, when timed, is ~1 % Triton.
Written before any defence (issue 13), reasoned, not yet run on a GPU: coverage must describe the
timed calls. Both paths give the right product (checked through Triton's interpreter).

The gate refuses its `torch.autograd.profiler._is_profiler_enabled` (a module's internals) since issue
32; it runs past the gate here, so that the runtime check is what catches it.

row: C7
options: static_policy=False
reference: matmul
device: gpu
expect: ok
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        kk = k0 + rk
        a = tl.load(a_ptr + rm[:, None] * K + kk[None, :], mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
        b = tl.load(b_ptr + kk[:, None] * N + rn[None, :], mask=(kk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a, b, input_precision="ieee")
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def copy_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        A, B = A.contiguous(), B.contiguous()
        m, k = A.shape
        n = B.shape[1]
        out = torch.empty((m, n), device=A.device, dtype=A.dtype)
        if torch.autograd.profiler._is_profiler_enabled:
            matmul_kernel[(triton.cdiv(m, 64), triton.cdiv(n, 64))](A, B, out, m, n, k, BM=64, BN=64, BK=32)
            return out
        C = torch.matmul(A, B)
        copy_kernel[(triton.cdiv(C.numel(), 1024),)](C, out, C.numel(), BLOCK=1024)
        return out
