"""Who ran a GPU short of memory (issue 32, item 4; run BK): the reference's own cap is the judge's
fault, the card short with the candidate within its share is nobody's verdict, and only a candidate
that held more than its share of the card is blamed. The channel's rule, with fake sandboxes and a
fake NVML reader; the GPU test (`test_gpu.py`) runs it with a real grab and the driver's figures."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import pytest

from drkernel.sandbox.cardmem import SLACK_BYTES, CardWitness, card_free, oom_numbers
from drkernel.sandbox.channel import Channel, ReferenceFailure, Verdict
from drkernel.sandbox.plumbing.process import SandboxFailure
from drkernel.sandbox.wire.protocol import Load, LoadReply, WireError
from drkernel.types import EvalOutcome, EvalResult

GiB = 1 << 30

NEW_STYLE = ("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.19 GiB "
             "of which {free} is free. Including non-PyTorch memory, this process has 5.94 GiB memory "
             "in use. Of the allocated memory 5.10 GiB is allocated by PyTorch")
OLD_STYLE = ("CUDA out of memory. Tried to allocate 512.00 MiB (GPU 0; 79.19 GiB total capacity; 5.10 GiB "
             "already allocated; {free} free; 5.94 GiB allowed; 5.50 GiB reserved in total by PyTorch)")


@pytest.mark.parametrize(("message", "expect"), [
    (NEW_STYLE.format(free="50.70 GiB"), (2 * GiB, int(50.70 * GiB))),
    (NEW_STYLE.format(free="300.00 MiB"), (2 * GiB, 300 << 20)),
    (OLD_STYLE.format(free="47.06 MiB"), (512 << 20, int(47.06 * (1 << 20)))),
    ("CUDA out of memory. Tried to allocate 20.00 MiB", None),  # no free figure: no verdict from it
    ("No space left on device", None),
    ("", None),
])
def test_the_allocators_message_gives_the_block_and_the_cards_free_memory(message: str, expect) -> None:  # type: ignore[no-untyped-def]
    assert oom_numbers(message) == expect


def test_without_a_driver_library_nvml_says_nothing() -> None:
    assert card_free("") is None
    # on a machine with no NVIDIA driver (CI, this one) the library is absent: None, never an error
    value = card_free("GPU-00000000-0000-0000-0000-000000000000")
    assert value is None or isinstance(value, int)


def test_the_settled_reading_waits_for_a_dead_process_memory_to_come_back() -> None:
    readings = iter([10 * GiB, 10 * GiB, 14 * GiB, 30 * GiB, 30 * GiB, 30 * GiB] + [30 * GiB] * 100)
    witness = CardWitness("GPU-x", 8 * GiB, read_free=lambda _: next(readings))
    assert witness.settled_free(timeout_s=2.0, settle_s=0.05, step_s=0.01) == 30 * GiB
    assert CardWitness("GPU-x", GiB, read_free=lambda _: None).settled_free() is None


# -- the channel's rule, with fake sandboxes ------------------------------------------------------
LOAD = Load(reference_code="x", size_snippet="", reference_hash="h", init_seed=1, entry_point="Model",
            candidate_path=None)


@dataclass
class FakeProc:
    """A sandbox that answers each op with the next canned reply."""

    replies: list[dict] = field(default_factory=list)  # type: ignore[type-arg]
    used: bool = True
    killed: bool = False
    sent: list[dict] = field(default_factory=list)  # type: ignore[type-arg]
    on_kill: object = None

    def alive(self) -> bool:
        return not self.killed

    def kill(self) -> None:
        self.killed = True
        if callable(self.on_kill):
            self.on_kill()

    def send(self, wire: dict) -> None:  # type: ignore[type-arg]
        self.sent.append(wire)

    def receive(self, deadline: float) -> dict:  # type: ignore[type-arg]
        return self.replies.pop(0)

    def wait_ready(self) -> None:
        return None


def oom(message: str) -> dict:  # type: ignore[type-arg]
    return {"ok": False, "error": WireError("reference_error", message, None).to_wire(), "op_s": 0.1}


LOADED = LoadReply(cached=False, flops=None).to_wire()


class Card:
    """The card's free memory as the fake NVML reads it; the candidate's grab comes back at its kill."""

    def __init__(self, free: int, candidate_holds: int) -> None:
        self.free, self.candidate_holds = free, candidate_holds

    def read(self, _: str) -> int:
        return self.free

    def release(self) -> None:
        self.free += self.candidate_holds


def channel(message: str, card: Card | None, share: int = 12 * GiB, alone: dict | None = None):  # type: ignore[no-untyped-def]
    cand = FakeProc(on_kill=card.release if card is not None else None)
    ref = FakeProc(replies=[oom(message)])
    fresh = FakeProc(replies=[alone or LOADED])
    respawned: list[FakeProc] = []

    def respawn() -> FakeProc:
        respawned.append(fresh)
        return fresh

    witness = CardWitness("GPU-x", share, read_free=card.read) if card is not None else None
    ch = Channel(cand, ref, time.monotonic() + 60, Verdict(EvalResult(outcome=EvalOutcome.OK)),  # type: ignore[arg-type]
                 respawn_ref=respawn, retry_timeout_s=30, witness=witness)
    return ch, cand, respawned


def test_a_reference_out_of_its_own_cap_with_the_card_free_is_the_judges_fault() -> None:
    """Run BK: 50.7 GiB of the card free, the reference's own 5.94 GiB cap ran out. The candidate is
    neither killed nor blamed; no retry can change the reference's cap."""
    ch, cand, respawned = channel(NEW_STYLE.format(free="50.70 GiB"), Card(50 * GiB, 0))
    with pytest.raises(ReferenceFailure, match="its own memory cap") as info:
        ch.ref(LOAD, LoadReply)
    assert "not blamed" in str(info.value)
    assert not cand.killed and respawned == []


def test_a_candidate_that_held_more_than_its_share_when_the_card_ran_short_is_blamed() -> None:
    ch, cand, respawned = channel(NEW_STYLE.format(free="300.00 MiB"), Card(300 << 20, 60 * GiB))
    with pytest.raises(SandboxFailure) as info:
        ch.ref(LOAD, LoadReply)
    assert info.value.kind == "resource_exhaustion"
    assert "beyond its share of 12.00 GiB" in info.value.message and "held 60.00 GiB" in info.value.message
    assert cand.killed and len(respawned) == 1


def test_a_candidate_within_its_share_when_the_card_ran_short_is_not_blamed() -> None:
    """Another judge or program took the card: the reference passes alone once they are done, but
    the candidate held only its share; infra_error, not the candidate's zero."""
    ch, cand, _ = channel(NEW_STYLE.format(free="300.00 MiB"), Card(300 << 20, 4 * GiB))
    with pytest.raises(ReferenceFailure, match="within its share") as info:
        ch.ref(LOAD, LoadReply)
    assert "not blamed" in str(info.value)
    assert cand.killed  # it had to go for the retry alone


REGION_OOM = "MemoryError: cuMemCreate failed: out of memory (CUresult 2)"  # wire/sharedmem.py's words


def test_a_region_the_driver_could_not_make_is_weighed_by_the_card_as_any_device_oom() -> None:
    """Run BO (six judges on one H100): the sealed span's region could not be made, the reference
    passed alone, and honest candidates holding a few GiB were blamed (`resource_exhaustion`) for
    the other judges' spans, because the driver's words were not read as device memory."""
    ch, cand, _ = channel(REGION_OOM, Card(40 << 20, 2 * GiB))
    with pytest.raises(ReferenceFailure, match="within its share") as info:
        ch.ref(LOAD, LoadReply)
    assert "not blamed" in str(info.value) and cand.killed
    ch, _, _ = channel(REGION_OOM, Card(40 << 20, 60 * GiB))
    with pytest.raises(SandboxFailure, match="beyond its share"):
        ch.ref(LOAD, LoadReply)


def test_the_slack_over_the_share_is_the_candidates_context_not_a_grab() -> None:
    share = 12 * GiB
    ch, _, _ = channel(NEW_STYLE.format(free="300.00 MiB"), Card(300 << 20, share + SLACK_BYTES), share=share)
    with pytest.raises(ReferenceFailure, match="within its share"):
        ch.ref(LOAD, LoadReply)
    ch, _, _ = channel(NEW_STYLE.format(free="300.00 MiB"), Card(300 << 20, share + SLACK_BYTES + GiB),
                       share=share)
    with pytest.raises(SandboxFailure, match="beyond its share"):
        ch.ref(LOAD, LoadReply)


@pytest.mark.parametrize("witness", ["none", "unreadable"])
def test_without_the_drivers_figures_the_older_rule_stands(witness: str) -> None:
    """No NVML (or no witness): a device failure that passes with the candidate gone is the candidate's."""
    message = NEW_STYLE.format(free="300.00 MiB")
    if witness == "none":
        ch, cand, _ = channel(message, None)
    else:
        ch, cand, _ = channel(message, Card(0, 0))
        ch.witness = CardWitness("GPU-x", GiB, read_free=lambda _: None)
    with pytest.raises(SandboxFailure) as info:
        ch.ref(LOAD, LoadReply)
    assert info.value.kind == "resource_exhaustion" and cand.killed


def test_a_failure_that_repeats_alone_stays_the_references() -> None:
    ch, cand, respawned = channel(NEW_STYLE.format(free="300.00 MiB"), Card(300 << 20, 60 * GiB),
                                  alone=oom(NEW_STYLE.format(free="60.00 GiB")))
    with pytest.raises(ReferenceFailure, match="Tried to allocate"):
        ch.ref(LOAD, LoadReply)
    assert cand.killed and len(respawned) == 1


def test_a_disk_failure_is_not_weighed_against_the_card() -> None:
    """"No space left" is the scratch disk: the card's figures say nothing of it (older rule)."""
    ch, cand, _ = channel("[Errno 28] No space left on device", Card(0, 60 * GiB))
    with pytest.raises(SandboxFailure) as info:
        ch.ref(LOAD, LoadReply)
    assert info.value.kind == "resource_exhaustion" and "beyond its share" not in info.value.message


def test_the_grab_attack_is_an_honest_kernel_where_there_is_no_device() -> None:
    """The GPU test's attack asset (`device_grab.py`) loads and passes on the CPU: what it does there
    is only the kernel, so on the GPU nothing but the grab can fail it."""
    from drkernel.sandbox.judge import Judge
    from drkernel.types import EvalRequest
    from tests.sandbox.corpus import ASSETS, FAST, reference_code

    code = (ASSETS / "attacks" / "device_grab.py").read_text().replace("__KEEP_MIB__", "8192")
    with Judge(device="cpu", cache_path=None, spares=1, refill=False) as j:
        r = j.evaluate(EvalRequest(reference_code=reference_code("relu_scale"), kernel_code=code,
                                   options=FAST.replace(static_policy=False)))
    assert r.outcome is EvalOutcome.OK, (r.outcome, r.error)
