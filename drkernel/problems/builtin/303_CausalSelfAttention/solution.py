"""Honest Triton solution of 303_CausalSelfAttention: every compute step runs in a @triton.jit kernel."""

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


@triton.jit
def _attention_kernel(qkv_ptr, o_ptr, S, H, sm_scale, DH: tl.constexpr, CAUSAL: tl.constexpr,
                      BM: tl.constexpr, BN: tl.constexpr):
    # qkv is (B*S, 3*H*DH) as produced by the qkv projection; o is (B*S, H*DH). Online softmax.
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rd = tl.arange(0, DH)
    stride = 3 * H * DH
    q = tl.load(qkv_ptr + (b * S + rm[:, None]) * stride + h * DH + rd[None, :],
                mask=rm[:, None] < S, other=0.0)
    m_i = tl.full((BM,), -float("inf"), tl.float32)
    l_i = tl.zeros((BM,), dtype=tl.float32)
    acc = tl.zeros((BM, DH), dtype=tl.float32)
    hi = S
    if CAUSAL:
        hi = tl.minimum(S, (tl.program_id(0) + 1) * BM)
    for n0 in range(0, hi, BN):
        rn = n0 + tl.arange(0, BN)
        k = tl.load(qkv_ptr + (b * S + rn[None, :]) * stride + (H + h) * DH + rd[:, None],
                    mask=rn[None, :] < S, other=0.0)
        s = tl.dot(q, k, input_precision="ieee") * sm_scale
        valid = rn[None, :] < S
        if CAUSAL:
            valid = valid & (rn[None, :] <= rm[:, None])
        s = tl.where(valid, s, -float("inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        p = tl.exp(s - m_new[:, None])
        alpha = tl.exp(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        v = tl.load(qkv_ptr + (b * S + rn[:, None]) * stride + (2 * H + h) * DH + rd[None, :],
                    mask=rn[:, None] < S, other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p, v, input_precision="ieee")
        m_i = m_new
    acc = acc / l_i[:, None]
    tl.store(o_ptr + (b * S + rm[:, None]) * (H * DH) + h * DH + rd[None, :], acc,
             mask=rm[:, None] < S)


def attention(qkv, batch, seq, heads, head_dim, causal):
    out = torch.empty((batch, seq, heads * head_dim), device=qkv.device, dtype=torch.float32)
    grid = (triton.cdiv(seq, 32), batch * heads)
    _attention_kernel[grid](qkv.contiguous(), out, seq, heads, 1.0 / math.sqrt(head_dim),
                            DH=head_dim, CAUSAL=causal, BM=32, BN=32)
    return out


class ModelNew(nn.Module):
    def __init__(self, d_model: int, n_head: int):
        super().__init__()
        self.w_qkv, self.b_qkv = linear_params(d_model, 3 * d_model)
        self.w_proj, self.b_proj = linear_params(d_model, d_model)
        self.n_head = n_head

    def forward(self, x):
        b, s, d = x.shape
        qkv = linear(x, self.w_qkv, self.b_qkv)
        y = attention(qkv, b, s, self.n_head, d // self.n_head, causal=True)
        return linear(y, self.w_proj, self.b_proj)
