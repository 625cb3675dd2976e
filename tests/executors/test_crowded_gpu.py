"""More judges on a GPU than its memory holds: the executor says so at start (runs BO-BP: six and
eight judges on one H100 80GB ran the card out of memory; four judged every honest kernel)."""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

import pytest

from drkernel.device import JUDGE_CARD_BYTES, card_memory_bytes, judges_that_fit
from drkernel.executors import local

H100 = 81_559 << 20  # bytes, as nvidia-smi reports the H100 80GB HBM3
H200 = 143_771 << 20


def test_how_many_judges_a_card_holds() -> None:
    assert judges_that_fit(H100) == 4 and judges_that_fit(H200) == 7
    assert judges_that_fit(JUDGE_CARD_BYTES - 1) == 1  # a small card still runs one


def _fake_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str) -> Path:
    """An `nvidia-smi` first on PATH that runs `body` (sh) and records its arguments."""
    script = tmp_path / "nvidia-smi"
    script.write_text(f'#!/bin/sh\necho "$@" > "{tmp_path}/args"\n{body}\n')
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ.get('PATH', '')}")
    return tmp_path / "args"


def test_the_cards_memory_is_read_from_the_driver_for_the_physical_gpu(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    args = _fake_smi(tmp_path, monkeypatch, "echo 81559")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    assert card_memory_bytes("cuda:1") == H100
    assert args.read_text().split()[-2:] == ["-i", "5"]  # cuda:1 is physical GPU 5
    assert card_memory_bytes("cpu") is None


@pytest.mark.parametrize("body", ["exit 9", "echo 'No devices were found'", "echo"])
def test_a_driver_that_cannot_say_gives_no_figure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 body: str) -> None:
    _fake_smi(tmp_path, monkeypatch, body)
    assert card_memory_bytes("cuda:0") is None


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
