"""drkernel.device: names of devices, and what a request for a GPU on a host without one says."""

from __future__ import annotations

import pytest
import torch

from drkernel.device import is_device_name, resolve_device
from drkernel.errors import ConfigError


@pytest.mark.skipif(torch.cuda.device_count() > 0, reason="a host without a GPU")
@pytest.mark.parametrize("device", ["cuda", "cuda:0", "cuda:3"])
def test_a_gpu_asked_for_on_a_host_without_one_names_the_cpu_not_one_commands_flag(device: str) -> None:
    """The hint said '(use --device cpu)', eval's flag, also under serve (--devices) and train
    (judge.devices), where no such flag exists."""
    with pytest.raises(ConfigError) as err:
        resolve_device(device)
    message = str(err.value)
    assert "no CUDA GPU is available" in message and "'cpu'" in message and "--device" not in message


def test_names() -> None:
    assert resolve_device("cpu") == "cpu"
    assert [is_device_name(d) for d in ("cpu", "cuda", "cuda:12", "gpu0", "cuda:", "")] == [
        True, True, True, False, False, False]
    with pytest.raises(ConfigError, match="unknown device 'gpu0'"):
        resolve_device("gpu0")


def test_card_state_says_nothing_where_nvml_cannot_read_a_card() -> None:
    """bench/judge_speed.py --trace reads the card's clocks, power and memory through card_state: where
    there is no driver (CI) or no such card, None, never an exception."""
    from drkernel import device

    assert device.card_state("") is None
    assert device.card_state("GPU-no-such-card") is None
    if device._nvml_library() is None:  # the CPU
        assert device.card_state("0") is None
