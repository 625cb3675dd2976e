"""Honest Triton solution of 301_MLP: every compute step runs in a @triton.jit kernel."""

import math

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _sigmoid(x):
    return 1.0 / (1.0 + tl.exp(-x))


@triton.jit
def _tanh(x):
    return 2.0 / (1.0 + tl.exp(-2.0 * x)) - 1.0


@triton.jit
def _gelu(x):
    return 0.5 * x * (1.0 + tl.erf(x * 0.7071067811865476))


@triton.jit
def _softplus(x):
    return tl.where(x > 20.0, x, tl.log(1.0 + tl.exp(tl.minimum(x, 20.0))))


@triton.jit
def _activate(x, ACT: tl.constexpr):
    # 0 none, 1 relu, 2 gelu (erf), 3 sigmoid, 4 tanh, 5 swish, 6 mish
    if ACT == 1:
        x = tl.maximum(x, 0.0)
    elif ACT == 2:
        x = _gelu(x)
    elif ACT == 3:
        x = _sigmoid(x)
    elif ACT == 4:
        x = _tanh(x)
    elif ACT == 5:
        x = x * _sigmoid(x)
    elif ACT == 6:
        x = x * _tanh(_softplus(x))
    return x


@triton.jit
def _matmul_kernel(a_ptr, b_ptr, bias_ptr, res_ptr, o_ptr, M, N, K, stride_bk, stride_bn, scale,
                   HAS_BIAS: tl.constexpr, ACT: tl.constexpr, HAS_RES: tl.constexpr,
                   BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    # out[M, N] = act(a[M, K] @ b[K, N] + bias) * scale (+ res); b is addressed through strides.
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        kk = k0 + rk
        a = tl.load(a_ptr + rm[:, None] * K + kk[None, :],
                    mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
        b = tl.load(b_ptr + kk[:, None] * stride_bk + rn[None, :] * stride_bn,
                    mask=(kk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a, b, input_precision="ieee")
    if HAS_BIAS:
        acc += tl.load(bias_ptr + rn, mask=rn < N, other=0.0)[None, :]
    acc = _activate(acc, ACT) * scale
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    if HAS_RES:
        acc += tl.load(res_ptr + rm[:, None] * N + rn[None, :], mask=mask, other=0.0)
    tl.store(o_ptr + rm[:, None] * N + rn[None, :], acc, mask=mask)


def _launch_matmul(a, b, stride_bk, stride_bn, n_out, bias, act, scale, residual):
    a2 = a.reshape(-1, a.shape[-1]).contiguous()
    m, k = a2.shape
    out = torch.empty((m, n_out), device=a.device, dtype=torch.float32)
    res = residual.reshape(m, n_out).contiguous() if residual is not None else out
    grid = (triton.cdiv(m, 64), triton.cdiv(n_out, 64))
    _matmul_kernel[grid](a2, b, bias if bias is not None else out, res, out, m, n_out, k,
                         stride_bk, stride_bn, float(scale), HAS_BIAS=bias is not None, ACT=act,
                         HAS_RES=residual is not None, BM=64, BN=64, BK=32)
    return out.reshape(*a.shape[:-1], n_out)


def linear(x, weight, bias=None, act=0, scale=1.0, residual=None):
    """act(x @ weight.T + bias) * scale + residual, weight stored (out_features, in_features)."""
    weight = weight.contiguous()
    return _launch_matmul(x, weight, 1, weight.shape[1], weight.shape[0], bias, act, scale, residual)


def linear_params(in_features, out_features, bias=True):
    """Parameters created and initialised exactly as nn.Linear does (same RNG draws, same order)."""
    weight = nn.Parameter(torch.empty(out_features, in_features))
    nn.init.kaiming_uniform_(weight, a=math.sqrt(5))
    if not bias:
        return weight, None
    bound = 1.0 / math.sqrt(in_features)
    return weight, nn.Parameter(torch.empty(out_features).uniform_(-bound, bound))


class ModelNew(nn.Module):
    def __init__(self, input_size: int, hidden_sizes: list, output_size: int):
        super().__init__()
        sizes = [input_size, *hidden_sizes, output_size]
        self.weights = nn.ParameterList()
        self.biases = nn.ParameterList()
        for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
            weight, bias = linear_params(fan_in, fan_out)
            self.weights.append(weight)
            self.biases.append(bias)

    def forward(self, x):
        last = len(self.weights) - 1
        for i, (weight, bias) in enumerate(zip(self.weights, self.biases)):
            x = linear(x, weight, bias, act=0 if i == last else 1)
        return x
