"""More judges on a GPU than its memory holds: the executor says so at start (runs BO-BP: six and
eight judges on one H100 80GB ran the card out of memory; four judged every honest kernel)."""

from __future__ import annotations

import ctypes
import logging
from typing import Any

import pytest

from drkernel import device
from drkernel.device import JUDGE_CARD_BYTES, card_memory, card_memory_bytes, judges_that_fit
from drkernel.executors import local

H100 = 81_559 << 20  # bytes, as the driver reports the H100 80GB HBM3
H200 = 143_771 << 20


def test_how_many_judges_a_card_holds() -> None:
    assert judges_that_fit(H100) == 4 and judges_that_fit(H200) == 7
    assert judges_that_fit(JUDGE_CARD_BYTES - 1) == 1  # a small card still runs one


class FakeNVML:
    """The driver's management library as drkernel.device calls it, for the cards `by_index`
    (physical index -> (free, total) bytes); records which indices were asked."""

    def __init__(self, by_index: dict[int, tuple[int, int]], fail_memory: bool = False) -> None:
        self.by_index, self.fail_memory = by_index, fail_memory
        self.asked: list[int] = []

    def nvmlDeviceGetHandleByIndex_v2(self, index: ctypes.c_uint, handle: Any) -> int:  # noqa: N802
        self.asked.append(index.value)
        if index.value not in self.by_index:
            return 2  # NVML_ERROR_INVALID_ARGUMENT
        handle._obj.value = index.value + 1
        return 0

    def nvmlDeviceGetMemoryInfo(self, handle: ctypes.c_void_p, memory: Any) -> int:  # noqa: N802
        if self.fail_memory:
            return 999  # NVML_ERROR_UNKNOWN
        memory._obj.free, memory._obj.total = self.by_index[handle.value - 1]
        return 0


def test_the_cards_memory_is_read_from_the_driver_for_the_physical_gpu(
        monkeypatch: pytest.MonkeyPatch) -> None:
    nvml = FakeNVML({5: (60 << 30, H100), 3: (1 << 30, H200)})
    monkeypatch.setattr(device, "_nvml_library", lambda: nvml)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    assert card_memory_bytes("cuda:1") == H100 and nvml.asked == [5]  # cuda:1 is physical GPU 5
    assert card_memory("5") == (60 << 30, H100)
    assert card_memory_bytes("cpu") is None and nvml.asked == [5, 5]


@pytest.mark.parametrize("nvml", [None, FakeNVML({}), FakeNVML({0: (0, H100)}, fail_memory=True)])
def test_a_driver_that_cannot_say_gives_no_figure(monkeypatch: pytest.MonkeyPatch,
                                                 nvml: FakeNVML | None) -> None:
    monkeypatch.setattr(device, "_nvml_library", lambda: nvml)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert card_memory_bytes("cuda:0") is None


def test_without_a_driver_the_reader_says_nothing_and_never_raises() -> None:
    # CI has no NVIDIA driver: the real loader finds no library
    assert card_memory("") is None
    assert card_memory_bytes("cuda:0") is None or isinstance(card_memory_bytes("cuda:0"), int)


def test_the_executor_warns_when_its_judges_overfill_a_card(monkeypatch: pytest.MonkeyPatch,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(local, "card_memory_bytes", lambda device: H100 if device == "cuda:0" else H200)
    with caplog.at_level(logging.WARNING, logger=local.__name__):
        local._warn_if_crowded(("cuda:0", "cuda:1", "cpu"), 6)
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 1 and "6 judges share cuda:0, a GPU of 80 GiB: it holds about 4" in warned[0]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger=local.__name__):
        local._warn_if_crowded(("cuda:0",), 4)  # the default fits
        monkeypatch.setattr(local, "card_memory_bytes", lambda device: None)
        local._warn_if_crowded(("cuda:0",), 16)  # no figure: nothing said
    assert caplog.records == []
