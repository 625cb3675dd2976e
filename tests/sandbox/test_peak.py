"""The device's bandwidth ceiling (sandbox/inside/peak.py) is the best of several ways of moving memory, each
at its fastest call: a copy alone once flagged an honest read-only reduction as faster than light
(107_Max_reduction_over_last_dim at 1.12x a copy's rate, docs/benchmark_log.md run U). The timer here is
a stand-in: what is checked is which measurement becomes the ceiling, not the device's rates."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from drkernel.sandbox.inside import peak

N, M = 1 << 14, 32
NBYTES = N * 4


class Timer:
    """Answers each call with the next list of times; remembers what it was given to time."""

    def __init__(self, answers: list[list[float] | Exception]) -> None:
        self.answers = list(answers)
        self.reps: list[int] = []

    def __call__(self, fn: Any, reps: int) -> list[float]:
        # first: a way that cannot run here (Triton off the interpreter) uses its turn
        got = self.answers.pop(0)
        self.reps.append(reps)
        if isinstance(got, Exception):
            raise got
        fn()  # every way really runs, here on the CPU
        return got


def ways() -> list[str]:
    return list(peak.bandwidth_candidates(torch.device("cpu"), N))


def test_the_ceiling_is_the_fastest_call_of_the_fastest_way() -> None:
    names = ways()
    assert names[:2] == ["copy", "torch_amax"]
    # copy: fastest call 1.0 ms for 2 x NBYTES; amax: fastest 0.25 ms for NBYTES (twice the copy's rate)
    answers: list[list[float] | Exception] = [[3.0, 1.0, 2.0], [0.5, 0.25, 0.4]]
    answers += [[10.0]] * (len(names) - 2) + [[2.0, 4.0, 6.0], [1.0, 1.0, 3.0]]
    bw, fp32, bf16, got = peak.measure(torch.device("cpu"), Timer(answers), n=N, m=M)
    assert got["copy"] == pytest.approx(2 * NBYTES / 1e6)
    assert got["torch_amax"] == pytest.approx(NBYTES / 0.25e6)
    assert bw == pytest.approx(max(got.values())) and bw == got["torch_amax"]
    flops = 2.0 * M**3
    assert fp32 == pytest.approx(flops / 4.0e9) and bf16 == pytest.approx(flops / 1.0e9)  # medians


def test_a_way_that_fails_is_no_ceiling_but_a_failed_copy_is_an_error() -> None:
    names = ways()
    answers: list[list[float] | Exception] = [[1.0], RuntimeError("no such kernel here")]
    answers += [[100.0]] * (len(names) - 2) + [[1.0], [1.0]]
    bw, _, _, got = peak.measure(torch.device("cpu"), Timer(answers), n=N, m=M)
    assert "torch_amax" not in got and bw == pytest.approx(2 * NBYTES / 1e6)
    with pytest.raises(RuntimeError, match="copy failed"):
        peak.measure(torch.device("cpu"), Timer([RuntimeError("copy failed")]), n=N, m=M)


def test_the_cache_key_names_the_new_method() -> None:
    """A ceiling cached by the copy-only measurement is never read back as this one's."""
    assert peak.METHOD != "peak-v1"


def test_the_event_timer_times_each_call_between_its_own_events_after_an_untimed_one() -> None:
    """One timer for the judge's peak op and bench/probes/peak_probe.py: the order of what it queues."""
    log: list[str] = []
    pairs = iter(range(100))

    def clock() -> tuple[int, int]:
        k = next(pairs)
        return 2 * k, 2 * k + 1

    timer = peak.event_timer(clock, lambda e: log.append(f"record {e}"), lambda s, e: float(e - s + len(log)),
                             lambda: log.append("sync"), lambda c: log.append(f"spin {c}"), 7)
    times = timer(lambda: log.append("call"), 2)
    assert log == ["call", "sync",
                   "spin 7", "record 0", "call", "record 1", "sync",
                   "spin 7", "record 2", "call", "record 3", "sync"]
    assert times == [1.0 + 7, 1.0 + 12]  # elapsed(start, end) of each call's pair, as the log stood then
    plain: list[str] = []
    peak.event_timer(clock, plain.append, lambda s, e: 0.0, lambda: None)(lambda: None, 1)
    assert len(plain) == 2  # no spin given: start and end only
