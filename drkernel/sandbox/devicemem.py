"""Device memory reserved by a trusted process (the reference's sandbox, the judge's comparison child)
before any candidate runs: a candidate's process is native code from its first line and can lift
its own cap (torch's per-process memory fraction lives inside it) and take the rest of the GPU.

The reservation is an allocation freed at once: torch's caching allocator keeps the block for this
process's later allocations, large ones carved out of it, small ones out of the small pool's cached
segments, so no other process can take that memory meanwhile. It is a fixed few GiB, not the process's
whole share: judges that share a GPU without knowing of each other (several servers, a `drkernel eval`
beside a server) each believing they own 0.3 of it ran out of device memory when every reference held
its share from the start (issue 32's run AT: four judges, 4 x 38 GB on a 140 GB H200). Beyond it, the
allocator keeps what a process used once (a reference's first run of a problem, timed while no
candidate is alive, grows it to the problem's size), and a failure for want of memory while a
candidate is alive is run again with the candidate gone (sandbox/channel.py): a candidate that starves
the judge has failed.
"""

from __future__ import annotations

import torch

__all__ = ["COMPARISON_BYTES", "REFERENCE_BYTES", "reserve"]

REFERENCE_BYTES = 2 << 30  # a reference sandbox's, from its start
COMPARISON_BYTES = 1 << 30  # the judge's comparison child's

_SMALL_BLOCK = 512 << 10  # under torch's 1 MiB small-allocation threshold: cached in 2 MiB segments


def reserve(device: torch.device, nbytes: int, small_bytes: int = 64 << 20) -> int:
    """Keep about `nbytes` of `device` (and `small_bytes` of small-pool segments) in this process's
    allocator cache; never more than half the device's free memory now. Returns the bytes kept."""
    free, _ = torch.cuda.mem_get_info(device)
    large = max(0, min(int(nbytes), free // 2))
    kept = 0
    if large >= 2 << 20:
        block = torch.empty(large, dtype=torch.uint8, device=device)
        kept += block.numel()
        del block
    smalls = [torch.empty(_SMALL_BLOCK, dtype=torch.uint8, device=device)
              for _ in range(max(0, small_bytes) // _SMALL_BLOCK)]
    kept += sum(t.numel() for t in smalls)
    del smalls
    return kept
