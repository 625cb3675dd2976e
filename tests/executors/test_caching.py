"""CachingExecutor: each distinct request judged once, persisted for a resumed run, kept apart per judge."""

from __future__ import annotations

from pathlib import Path

from drkernel.executors.caching import CachingExecutor
from drkernel.executors.fake import FakeExecutor
from drkernel.executors.local import LocalExecutor
from drkernel.types import EvalOutcome, EvalRequest, EvalResult


def _request(task_id: str) -> EvalRequest:
    return EvalRequest(reference_code="r", kernel_code="# a kernel", task_id=task_id)


def test_a_cache_file_is_reused_by_the_same_judge_only(tmp_path: Path) -> None:
    """A run judged with the fake judge (every kernel correct), then again in the same run folder with
    the real one: the fake verdicts were reused for every kernel seen before."""
    from drkernel.executors.fake import FakeExecutor as Fake
    from drkernel.rl.trainer import cached_executor

    path = tmp_path / "eval_cache.jsonl"
    fake = cached_executor(FakeExecutor(), Fake.Config(), path)
    assert fake.evaluate([_request("a")])[0].outcome is EvalOutcome.OK
    fake.close()

    def incorrect(request: EvalRequest) -> EvalResult:
        return EvalResult(outcome=EvalOutcome.INCORRECT, compiled=True, task_id=request.task_id)

    real = cached_executor(FakeExecutor(incorrect), LocalExecutor.Config(devices=("cpu",)), path)
    assert real.evaluate([_request("b")])[0].outcome is EvalOutcome.INCORRECT
    assert (real.hits, real.misses) == (0, 1)
    again = cached_executor(FakeExecutor(incorrect), LocalExecutor.Config(devices=("cpu",)), path)
    assert again.evaluate([_request("c")])[0].outcome is EvalOutcome.INCORRECT
    assert (again.hits, again.misses) == (1, 0)  # a resumed run with the same judge: judged once


def test_identical_requests_are_judged_once_with_their_own_task_ids(tmp_path: Path) -> None:
    inner = FakeExecutor()
    cache = CachingExecutor(inner)
    first, second = cache.evaluate([_request("x"), _request("y")])
    assert len(inner.calls) == 1 and (first.task_id, second.task_id) == ("x", "y")


def test_the_same_judge_at_another_address_keeps_its_verdicts(tmp_path: Path) -> None:
    """The judge service moved (judge.base_url), or given other transport patience: its cached verdicts
    were thrown away. A setting that decides verdicts (the deadlines) still keeps them apart."""
    from drkernel.executors.http import HttpExecutor
    from drkernel.rl.trainer import cached_executor

    path = tmp_path / "eval_cache.jsonl"

    def judged(config: HttpExecutor.Config) -> tuple[int, int]:
        cache = cached_executor(FakeExecutor(), config, path)
        assert cache.evaluate([_request("a")])[0].outcome is EvalOutcome.OK
        return cache.hits, cache.misses

    assert judged(HttpExecutor.Config(base_url="http://old:1")) == (0, 1)
    moved = HttpExecutor.Config(base_url="https://new:2", request_timeout_s=5.0, max_retries=1)
    assert judged(moved) == (1, 0)
    assert judged(HttpExecutor.Config(base_url="http://old:1", deadline_factor=0.5)) == (0, 1)
    local = LocalExecutor.Config(devices=("cpu",))
    assert judged(local) == (0, 1)
    assert judged(LocalExecutor.Config(devices=("cpu",), start_timeout_s=5.0)) == (1, 0)
    assert judged(LocalExecutor.Config(devices=("cpu", "cpu"))) == (0, 1)
