"""One contract (`check_executor`) run against every executor: fake, local, Ray, HTTP."""

from __future__ import annotations

from pathlib import Path

import pytest

from drkernel.executors.contract import check_executor
from drkernel.executors.fake import FakeExecutor
from drkernel.executors.fake_judge import FakeJudge, fake_judge
from drkernel.executors.local import LocalExecutor

BUDGET_S = 1.0  # per-candidate budget: the timeout case spends it


def test_fake_executor_keeps_the_contract() -> None:
    # FakeExecutor does not refuse work after close(): the lead's file; see the report.
    check_executor(lambda: FakeExecutor(handler=FakeJudge().evaluate), timeout_s=BUDGET_S,
                   strict_close=True)


@pytest.mark.parametrize("isolation", ["thread", "process"])
def test_local_executor_keeps_the_contract(isolation: str) -> None:
    config = LocalExecutor.Config(devices=("cpu", "cpu"), isolation=isolation)
    check_executor(lambda: LocalExecutor(config, fake_judge), timeout_s=BUDGET_S)


def test_ray_executor_keeps_the_contract(ray_cluster: None) -> None:
    from drkernel.executors.ray import RayExecutor

    config = RayExecutor.Config(num_workers=2)
    check_executor(lambda: RayExecutor(config, fake_judge), timeout_s=BUDGET_S)


def test_http_executor_keeps_the_contract(fake_server: str) -> None:
    from drkernel.executors.http import HttpExecutor

    config = HttpExecutor.Config(base_url=fake_server)
    check_executor(lambda: HttpExecutor(config), timeout_s=BUDGET_S)


@pytest.mark.slow
def test_local_executor_with_the_real_judge_keeps_the_contract() -> None:
    if not Path(__file__).parents[2].joinpath("drkernel/sandbox/judge.py").exists():
        pytest.skip("the judge is not in this checkout")
    config = LocalExecutor.Config(devices=("cpu",), isolation="process")
    check_executor(lambda: LocalExecutor(config), timeout_s=8.0, concurrency=False,
                   leak_grace_s=30.0)


def test_the_contract_catches_a_broken_executor() -> None:
    class Reversed(FakeExecutor):
        def evaluate(self, requests):  # type: ignore[no-untyped-def]
            return list(reversed(super().evaluate(requests)))

    with pytest.raises(AssertionError, match="order broken|!="):
        check_executor(Reversed(handler=FakeJudge().evaluate), timeout_s=BUDGET_S,
                       strict_close=True)
