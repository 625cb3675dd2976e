"""A reference is timed only while no candidate process is alive on the host (issue 32, class 4):
the host-wide candidates lock (sandbox/devicelock.py) and the cache entry that says how and when."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from drkernel.sandbox import devicelock
from drkernel.sandbox.judge import Judge
from drkernel.sandbox.refcache import ReferenceTimingCache
from drkernel.types import EvalOutcome, EvalRequest
from tests.sandbox.corpus import FAST, asset, reference_code


@pytest.fixture(autouse=True)
def private_locks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DRKERNEL_LOCK_DIR", str(tmp_path / "locks"))


def test_no_candidates_waits_for_every_live_candidate_and_keeps_new_ones_out() -> None:
    events: list[str] = []
    first_alive, release_first = threading.Event(), threading.Event()

    def candidate(name: str, hold: threading.Event | None) -> None:
        with devicelock.candidate_alive():
            events.append(f"{name} alive")
            if hold is not None:
                first_alive.set()
                hold.wait(10)
            events.append(f"{name} gone")

    def reference() -> None:
        with devicelock.no_candidates():
            events.append("reference timed")
            time.sleep(0.3)
            events.append("reference done")

    a = threading.Thread(target=candidate, args=("a", release_first))
    a.start()
    assert first_alive.wait(5)
    r = threading.Thread(target=reference)
    r.start()
    time.sleep(0.3)
    assert "reference timed" not in events  # a candidate is alive: it waits
    b = threading.Thread(target=candidate, args=("b", None))
    b.start()
    time.sleep(0.3)
    assert "b alive" not in events  # writer first: no new candidate while the reference waits
    release_first.set()
    for t in (a, r, b):
        t.join(10)
    assert events == ["a alive", "a gone", "reference timed", "reference done", "b alive", "b gone"]


def test_the_cache_entry_says_when_and_that_no_candidate_was_alive(tmp_path: Path) -> None:
    cache_path = tmp_path / "timings.sqlite"
    honest = asset("kernels", "relu_scale")
    with Judge(device="cpu", cache_path=cache_path, spares=1) as judge:
        r = judge.evaluate(EvalRequest(reference_code=reference_code("relu_scale"), kernel_code=honest.code,
                                       options=FAST))
    assert r.outcome is EvalOutcome.OK, r.error
    assert r.reference_timing is not None
    assert r.reference_timing.measured_alone is True and r.reference_timing.measured_at
    assert r.stage_s.get("reference_first", 0) > 0
    cache = ReferenceTimingCache(cache_path)
    try:
        (key,) = [k for k in cache._db.execute("SELECT key FROM reference_timing").fetchall()
                  if "peak" not in k[0]]
        stored = cache.get(key[0])
    finally:
        cache.close()
    assert stored is not None and stored.measured_alone is True
    assert stored.measured_at == r.reference_timing.measured_at
