"""Issue 32, class 3: blame shifted to the judge through the device's memory. With the gate passed
(static_policy=False), the submission lifts its own per-process memory cap at import (torch's fraction
lives in its process) and takes all of the card's free memory in 1 GiB blocks. It lets go of
__KEEP_MIB__ MiB of them again, which its own allocator keeps cached: enough for its own calls, and no
other process can have it. The judge's next op that needs memory beyond what it holds (a comparison, a
reference call) runs out. A judge that took that failure at its word would report infra_error
(trainers drop it, pools retry it) instead of the candidate's failure.
HOLDS: the judge reads the card's free memory through NVML before and after it stops the candidate's
sandbox, finds it held far more than its share, runs the failed op again alone, and reports the
candidate's `resource_exhaustion` (sandbox/cardmem.py, channel.py). On the CPU there is no device
memory to take: the kernel is an honest relu_scale there.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl

_HELD = []


def _grab():
    if not torch.cuda.is_available():
        return
    torch.cuda.set_per_process_memory_fraction(1.0, 0)
    chunk = 1 << 30
    while chunk >= (2 << 20):
        try:
            _HELD.append(torch.empty(chunk, dtype=torch.uint8, device="cuda"))
        except RuntimeError:
            chunk //= 2
    keep = __KEEP_MIB__ << 20
    while keep > 0 and _HELD:
        keep -= _HELD.pop().numel()  # back to this process's allocator cache, not to the card
    print(f"GRABBED {sum(t.numel() for t in _HELD) / 2**30:.1f} GiB, card free "
          f"{torch.cuda.mem_get_info(0)[0] / 2**30:.2f} GiB", flush=True)


_grab()


@triton.jit
def relu_scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask), 0.0) * 2.0 + 1.0, mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        n = x.numel()
        relu_scale_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
        return out
