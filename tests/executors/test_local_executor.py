"""LocalExecutor: retries when judges break or die, bounded; cancellation; deadlines; devices."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from drkernel.errors import ConfigError, ExecutorError
from drkernel.executors.fake_judge import FakeJudge, fake_judge
from drkernel.executors.local import LocalExecutor, detect_devices
from drkernel.types import EvalOptions, EvalOutcome, EvalRequest, EvalResult

REF = "class Model: pass  # reference"


def req(code: str, task_id: str = "t", timeout_s: float = 30.0) -> EvalRequest:
    return EvalRequest(reference_code=REF, kernel_code=code, task_id=task_id,
                       options=EvalOptions(timeout_s=timeout_s))


def pool(isolation: str = "process", n: int = 2, **kw: object) -> LocalExecutor:
    return LocalExecutor(LocalExecutor.Config(devices=("cpu",) * n, isolation=isolation, **kw),
                         fake_judge)


def test_a_judge_that_raises_is_rebuilt_and_the_task_gets_infra_error_after_bounded_tries() -> None:
    with pool("thread", max_attempts=2) as ex:
        (res,) = ex.evaluate([req("# fake: infra_error")])
        ok = ex.evaluate([req("# fake: speedup=2", "after")])[0]
        restarts = sum(w.restarts for w in ex.worker_states())
    assert res.outcome is EvalOutcome.INFRA_ERROR and res.error and res.error.kind == "worker_lost"
    assert restarts == 2
    assert ok.outcome is EvalOutcome.OK  # the pool recovered


def test_a_worker_process_that_dies_mid_task_has_its_task_retried(tmp_path: Path) -> None:
    marker = tmp_path / "died"
    with pool() as ex:
        (res,) = ex.evaluate([req(f"# fake: die_once={marker}\n# fake: speedup=3")])
        restarts = sum(w.restarts for w in ex.worker_states())
    assert marker.exists() and restarts == 1
    assert res.outcome is EvalOutcome.OK and res.speedup == 3.0


def test_kill_minus_9_of_a_busy_worker_retries_its_task_elsewhere() -> None:
    with pool() as ex:
        out: list = []
        t = threading.Thread(target=lambda: out.extend(ex.evaluate([req("# fake: sleep=1.5", "k")])))
        t.start()
        busy = _wait_busy(ex)
        assert ex.kill_worker(busy)
        t.join(timeout=30)
        states = ex.worker_states()
    assert out and out[0].outcome is EvalOutcome.OK and out[0].task_id == "k"
    assert states[busy].restarts == 1


def test_cancel_kills_a_running_evaluation() -> None:
    with pool() as ex:
        out: list = []
        t = threading.Thread(target=lambda: out.extend(ex.evaluate([req("# fake: sleep=20", "c")])))
        t.start()
        _wait_busy(ex)
        started = time.monotonic()
        assert ex.cancel("c")
        t.join(timeout=30)
        assert not ex.cancel("nothing-running")
    assert time.monotonic() - started < 10
    assert out[0].outcome is EvalOutcome.INFRA_ERROR and out[0].error.kind == "cancelled"


def test_a_judge_silent_past_its_deadline_is_the_judges_fault_not_the_candidates() -> None:
    with pool("thread", n=1, deadline_factor=0.0, deadline_grace_s=0.3) as ex:
        (res,) = ex.evaluate([req("# fake: sleep=2")])
        restarts = ex.worker_states()[0].restarts
    assert res.outcome is EvalOutcome.INFRA_ERROR and res.error.kind == "judge_unresponsive"
    assert restarts == 2  # replaced, retried once on a fresh judge, replaced again


def test_a_batch_runs_in_parallel_across_workers_in_order() -> None:
    with pool("thread", n=4) as ex:
        started = time.monotonic()
        results = ex.evaluate([req("# fake: sleep=0.4", f"p{i}") for i in range(8)])
        elapsed = time.monotonic() - started
        devices = {w.worker_id for w in ex.worker_states() if w.tasks_done}
    assert [r.task_id for r in results] == [f"p{i}" for i in range(8)]
    assert elapsed < 2.5 and len(devices) == 4


def test_requests_the_judge_refuses_become_results_without_restarts() -> None:
    class Refusing(FakeJudge):
        def evaluate(self, request):  # type: ignore[no-untyped-def]
            raise ConfigError("num_correct_trials: must be between 1 and 100")

    with LocalExecutor(LocalExecutor.Config(devices=("cpu",), isolation="thread"), Refusing) as ex:
        (res,) = ex.evaluate([req("x")])
        assert ex.worker_states()[0].restarts == 0
    assert res.outcome is EvalOutcome.INFRA_ERROR and res.error.kind == "invalid_request"


def test_a_judge_that_cannot_start_fails_the_pool_clearly() -> None:
    def broken(device: str) -> FakeJudge:
        raise RuntimeError("no sandbox for you")

    with pytest.raises(ExecutorError, match="no judge worker"):
        LocalExecutor(LocalExecutor.Config(devices=("cpu",), isolation="thread"), broken)


def test_secrets_are_scrubbed_from_judge_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DRKERNEL_AUTH_TOKEN", "s3cret")
    with pool(n=1, scrub_env=("DRKERNEL_AUTH_TOKEN",)) as ex:
        pid = ex.worker_states()[0].pid
        environ = Path(f"/proc/{pid}/environ").read_bytes()
    assert b"DRKERNEL_AUTH_TOKEN" not in environ and b"s3cret" not in environ


def test_config_is_validated_and_devices_detected() -> None:
    with pytest.raises(ConfigError):
        LocalExecutor.Config(isolation="fibers")
    with pytest.raises(ConfigError):
        LocalExecutor.Config(max_attempts=0)
    assert detect_devices(3) == ("cpu", "cpu", "cpu") or detect_devices(3)[0].startswith("cuda")


def _wait_busy(ex: LocalExecutor) -> int:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        for i, w in enumerate(ex.worker_states()):
            if w.state == "busy":
                return i
        time.sleep(0.02)
    raise AssertionError("no worker became busy")


def test_the_pool_sends_the_request_as_given_to_the_judge_of_the_worker_device() -> None:
    seen: list[EvalRequest] = []

    class Recording:
        def evaluate(self, request: EvalRequest) -> EvalResult:
            seen.append(request)
            return fake_judge("cpu").evaluate(request)

        def close(self) -> None:
            pass

    sent = EvalRequest(reference_code=REF, kernel_code="# fake: speedup=2", task_id="t",
                       problem_name="L1/relu", shape_variants=("N = 7",),
                       options=EvalOptions(timeout_s=30, num_perf_trials=4))
    devices: list[str] = []

    def factory(device: str) -> Recording:
        devices.append(device)
        return Recording()

    with LocalExecutor(LocalExecutor.Config(devices=("cpu",), isolation="thread"), factory) as ex:
        (res,) = ex.evaluate([sent])
    assert res.outcome is EvalOutcome.OK
    assert seen == [sent] and devices == ["cpu"]  # every field as sent; the device is the judge's
