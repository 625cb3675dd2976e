"""Who ran a GPU short of memory: the judge's evidence, read outside every sandbox.

A reference (or comparison) op that runs out of device memory while a candidate's sandbox is alive
has three possible causes, and only one of them is the candidate's:

- the reference's own per-process cap: the allocator's message says the card had room for the block
  it tried to allocate. Nothing the candidate does moves that cap: the judge's fault (infra_error).
- the candidate took the card: it lifted its own cap (native code can) and holds more of the card
  than its share. The candidate starved the judge: its failure.
- the card was short for another reason (other judges, other programs): infra_error.

`oom_numbers` reads the first from the message of torch's caching allocator. For the other two the
judge reads the card's free memory through NVML (the driver's management library, loaded here with
ctypes; no CUDA context, no package) just before and just after it kills the candidate's sandbox: the
difference is what that sandbox held. NVML reads the whole card, so another program freeing memory
in between shows up as the candidate's; the judge only blames beyond the candidate's share plus
`SLACK_BYTES`. Where NVML cannot be read (no driver library, the CPU), `card_free` says None and the
judge keeps the older rule (a failure that passes with the candidate gone is the candidate's).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass

from drkernel.device import card_memory

__all__ = ["SLACK_BYTES", "CardWitness", "card_free", "card_identity", "oom_numbers"]

SLACK_BYTES = 1 << 30  # beyond its share: a CUDA context, Triton's module loads, NVML's rounding

_UNITS = {"b": 1, "bytes": 1, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40,
          "kb": 1 << 10, "mb": 1 << 20, "gb": 1 << 30, "tb": 1 << 40}
_SIZE = r"([0-9]+(?:\.[0-9]+)?)\s*(TiB|GiB|MiB|KiB|TB|GB|MB|KB|bytes|B)\b"
_TRIED = re.compile(r"tried to allocate\s+" + _SIZE, re.IGNORECASE)
# torch >= 2.1: "... has a total capacity of 79.19 GiB of which 50.70 GiB is free";
# older: "(GPU 0; 79.19 GiB total capacity; 5.1 GiB already allocated; 50.70 GiB free; ..."
_FREE = (re.compile(r"of which\s+" + _SIZE + r"\s+is free", re.IGNORECASE),
         re.compile(r";\s*" + _SIZE + r"\s+free\s*;", re.IGNORECASE))


def _bytes(number: str, unit: str) -> int:
    return int(float(number) * _UNITS[unit.lower()])


def oom_numbers(message: str) -> tuple[int, int] | None:
    """(bytes the allocator tried to allocate, bytes free on the card then) from a torch
    out-of-memory message; None where the message does not say both."""
    tried = _TRIED.search(message)
    free = next((m for m in (p.search(message) for p in _FREE) if m is not None), None)
    if tried is None or free is None:
        return None
    return _bytes(*tried.groups()), _bytes(*free.groups())


def card_free(device_id: str) -> int | None:
    """The free bytes of the card `device_id` names (its UUID, "GPU-..." as NVML writes it, or its
    PCI bus id "0000:19:00.0"), as the driver sees it; None where NVML cannot say (drkernel.device)."""
    memory = card_memory(device_id) if device_id else None
    return memory[0] if memory is not None else None


def card_identity() -> tuple[str, int]:
    """(this process's CUDA device 0 as NVML names it, its memory in bytes): its UUID where torch
    reports one, else its PCI bus id. A reference sandbox reads it at start-up, before any candidate
    code runs, so that its hello can be believed."""
    import torch

    props = torch.cuda.get_device_properties(0)
    name = str(getattr(props, "uuid", "") or "")
    if name and not name.startswith(("GPU-", "MIG-")):
        name = "GPU-" + name
    if not name and hasattr(props, "pci_bus_id"):
        domain, device = getattr(props, "pci_domain_id", 0), getattr(props, "pci_device_id", 0)
        name = f"{domain:08x}:{props.pci_bus_id:02x}:{device:02x}.0"
    return name, int(props.total_memory)


@dataclass(frozen=True)
class CardWitness:
    """What the judge needs to say who ran a card short: the card (`device_id`, from the trusted
    reference sandbox's hello), the candidate's share of it in bytes, and the reader of its free
    memory (`card_free`; tests pass their own)."""

    device_id: str
    candidate_share: int
    read_free: Callable[[str], int | None] = card_free

    def free(self) -> int | None:
        return self.read_free(self.device_id)

    def settled_free(self, timeout_s: float = 2.0, settle_s: float = 0.3, step_s: float = 0.05) -> int | None:
        """The most the card had free over at least `settle_s` and until it stops rising (a killed
        process's memory goes back to the driver as its context is torn down, about as it exits)."""
        best = self.free()
        if best is None:
            return None
        start = time.monotonic()
        while time.monotonic() - start < timeout_s:
            time.sleep(step_s)
            now = self.free()
            if now is None:
                break
            if now <= best and time.monotonic() - start >= settle_s:
                break
            best = max(best, now)
        return best
