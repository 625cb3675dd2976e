"""Honest Triton solution of 304_ConvResidualBlock: every compute step runs in a @triton.jit kernel."""

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
def _conv2d_kernel(x_ptr, w_ptr, b_ptr, res_ptr, post_ptr, o_ptr, NB, C, H, W, OC, OH, OW,
                   KH: tl.constexpr, KW: tl.constexpr, PAD: tl.constexpr, HAS_RES: tl.constexpr,
                   ACT: tl.constexpr, HAS_POST: tl.constexpr,
                   BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    # Implicit GEMM: rows are output pixels (n, oh, ow), columns output channels, K = C*KH*KW.
    # out = act(conv(x) + bias (+ res)) (+ post[oc]); stride 1, zero padding PAD.
    M = NB * OH * OW
    K = C * KH * KW
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    n = rm // (OH * OW)
    p = rm % (OH * OW)
    oh = p // OW
    ow = p % OW
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        kk = k0 + tl.arange(0, BK)
        c = kk // (KH * KW)
        r = kk % (KH * KW)
        ih = oh[:, None] + (r // KW)[None, :] - PAD
        iw = ow[:, None] + (r % KW)[None, :] - PAD
        amask = (rm[:, None] < M) & (kk[None, :] < K) & (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
        a = tl.load(x_ptr + ((n[:, None] * C + c[None, :]) * H + ih) * W + iw, mask=amask, other=0.0)
        b = tl.load(w_ptr + rn[None, :] * K + kk[:, None],
                    mask=(rn[None, :] < OC) & (kk[:, None] < K), other=0.0)
        acc += tl.dot(a, b, input_precision="ieee")
    acc += tl.load(b_ptr + rn, mask=rn < OC, other=0.0)[None, :]
    mask = (rm[:, None] < M) & (rn[None, :] < OC)
    optr = ((n[:, None] * OC + rn[None, :]) * OH + oh[:, None]) * OW + ow[:, None]
    if HAS_RES:
        acc += tl.load(res_ptr + optr, mask=mask, other=0.0)
    acc = _activate(acc, ACT)
    if HAS_POST:
        acc += tl.load(post_ptr + rn, mask=rn < OC, other=0.0)[None, :]
    tl.store(o_ptr + optr, acc, mask=mask)


def conv2d(x, weight, bias, padding=0, act=0, residual=None, post_bias=None):
    x = x.contiguous()
    nb, c, h, w = x.shape
    oc, _, kh, kw = weight.shape
    oh, ow = h + 2 * padding - kh + 1, w + 2 * padding - kw + 1
    out = torch.empty((nb, oc, oh, ow), device=x.device, dtype=torch.float32)
    res = residual.contiguous() if residual is not None else out
    post = post_bias.reshape(-1) if post_bias is not None else bias
    grid = (triton.cdiv(nb * oh * ow, 64), triton.cdiv(oc, 32))
    _conv2d_kernel[grid](x, weight.contiguous(), bias, res, post, out, nb, c, h, w, oc, oh, ow,
                         KH=kh, KW=kw, PAD=padding, HAS_RES=residual is not None, ACT=act,
                         HAS_POST=post_bias is not None, BM=64, BN=32, BK=32)
    return out


def conv2d_params(in_channels, out_channels, kernel_size):
    """Parameters created and initialised exactly as nn.Conv2d does (same RNG draws, same order)."""
    weight = nn.Parameter(torch.empty(out_channels, in_channels, kernel_size, kernel_size))
    nn.init.kaiming_uniform_(weight, a=math.sqrt(5))
    bound = 1.0 / math.sqrt(in_channels * kernel_size * kernel_size)
    return weight, nn.Parameter(torch.empty(out_channels).uniform_(-bound, bound))


class ModelNew(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.w1, self.b1 = conv2d_params(channels, channels, 3)
        self.w2, self.b2 = conv2d_params(channels, channels, 3)

    def forward(self, x):
        h = conv2d(x, self.w1, self.b1, padding=1, act=1)
        return conv2d(h, self.w2, self.b2, padding=1, act=1, residual=x)
