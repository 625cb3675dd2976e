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
the judge has failed. What a large problem grew is given back once it is done with (`trim`: the
reference's sandbox when it loads another problem, the comparison child after each comparison), so
that the next problem's candidate finds the device as the judge promised it.
"""

from __future__ import annotations

import torch

__all__ = ["COMPARISON_BYTES", "REFERENCE_BYTES", "TRIM_OVER", "reserve", "trim"]

REFERENCE_BYTES = 2 << 30  # a reference sandbox's, from its start
COMPARISON_BYTES = 1 << 30  # the judge's comparison child's

TRIM_OVER = 2.0  # a process caching more than this x its reservation gives the rest back (trim)

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


def trim(device: torch.device, nbytes: int, over: float = TRIM_OVER) -> bool:
    """Give what this process's allocator caches back to the device once it caches more than
    `over` x `nbytes` (a large problem is done with), then keep `nbytes` again. Memory that live
    tensors hold stays theirs. True when it gave memory back.

    Without it, the largest problem a trusted process ever saw stays cached in it: after a 4 GiB
    problem the comparison child kept tens of GiB, and a later candidate sandbox found 0.2 GiB of an
    H200 free (run BH, KernelBench L1/5)."""
    if torch.cuda.memory_reserved(device) <= over * nbytes:
        return False
    torch.cuda.empty_cache()
    reserve(device, nbytes)
    return True
