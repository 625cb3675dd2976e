"""rl/build.py: the judge section -> an executor config of executors/build.py."""

from __future__ import annotations

import pytest

from drkernel.errors import ConfigError
from drkernel.executors.fake import FakeExecutor
from drkernel.executors.http import HttpExecutor
from drkernel.executors.local import LocalExecutor
from drkernel.rl.build import judge_executor_config
from drkernel.rl.config import JudgeConfig


def test_the_judge_section_names_an_executor_config() -> None:
    assert judge_executor_config(JudgeConfig(executor="fake")) == FakeExecutor.Config()
    assert judge_executor_config(JudgeConfig(executor="http", server="http://127.0.0.1:9")) == \
        HttpExecutor.Config(base_url="http://127.0.0.1:9")
    assert judge_executor_config(JudgeConfig()) == LocalExecutor.Config()
    assert judge_executor_config(JudgeConfig(device="cpu", workers=3)) == \
        LocalExecutor.Config(devices=("cpu",) * 3, num_cpu_workers=3)
    with pytest.raises(ConfigError, match=r"judge.executor http needs judge.server \(a drkernel server"):
        judge_executor_config(JudgeConfig(executor="http"))
