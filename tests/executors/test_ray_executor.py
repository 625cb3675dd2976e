"""RayExecutor on a private local cluster bound to 127.0.0.1: actor death, cancel, error seam."""

from __future__ import annotations

import threading
import time

import pytest

from drkernel.errors import EvalTimeout, ExecutorError, WorkerLost
from drkernel.executors.fake_judge import fake_judge
from drkernel.types import EvalOptions, EvalOutcome, EvalRequest

ray = pytest.importorskip("ray")

from drkernel.executors.ray import RayExecutor, ray_errors  # noqa: E402


def req(code: str, task_id: str) -> EvalRequest:
    return EvalRequest(reference_code="ref", kernel_code=code, task_id=task_id,
                       options=EvalOptions(timeout_s=30))


def test_the_cluster_and_the_actors_are_on_loopback(ray_cluster: None) -> None:
    with RayExecutor(RayExecutor.Config(num_workers=1), fake_judge) as ex:
        (res,) = ex.evaluate([req("# fake: speedup=2", "a")])
    assert res.outcome is EvalOutcome.OK
    assert {n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"]} == {"127.0.0.1"}
    assert res.device and res.device.node_id in {n["NodeID"] for n in ray.nodes()}
    assert res.device.worker_id == "ray-0" and res.device.host


def test_an_actor_killed_mid_task_has_its_task_retried_on_another(ray_cluster: None) -> None:
    with RayExecutor(RayExecutor.Config(num_workers=2), fake_judge) as ex:
        out: list = []
        t = threading.Thread(target=lambda: out.extend(ex.evaluate([req("# fake: sleep=2", "k")])))
        t.start()
        busy = _wait_busy(ex)
        assert ex.kill_worker(busy)
        t.join(timeout=60)
        restarts = ex.worker_states()[busy].restarts
    assert out and out[0].outcome is EvalOutcome.OK and out[0].task_id == "k"
    assert restarts == 1


def test_an_actor_that_dies_every_time_ends_as_infra_error(ray_cluster: None) -> None:
    config = RayExecutor.Config(num_workers=1, max_attempts=2)
    with RayExecutor(config, fake_judge) as ex:
        (res,) = ex.evaluate([req("# fake: die", "d")])
    assert res.outcome is EvalOutcome.INFRA_ERROR and res.error.kind == "worker_lost"


def test_cancel_kills_the_running_actor(ray_cluster: None) -> None:
    with RayExecutor(RayExecutor.Config(num_workers=1), fake_judge) as ex:
        out: list = []
        t = threading.Thread(target=lambda: out.extend(ex.evaluate([req("# fake: sleep=30", "c")])))
        t.start()
        _wait_busy(ex)
        assert ex.cancel("c")
        t.join(timeout=60)
    assert out[0].outcome is EvalOutcome.INFRA_ERROR and out[0].error.kind == "cancelled"


def test_ray_errors_are_translated_at_the_seam() -> None:
    import ray.exceptions as rex

    with pytest.raises(EvalTimeout), ray_errors("x"):
        raise rex.GetTimeoutError("slow")
    with pytest.raises(WorkerLost), ray_errors("x"):
        raise rex.RayActorError()
    with pytest.raises(ExecutorError), ray_errors("x"):
        raise rex.RaySystemError("gcs down")


def _wait_busy(ex: RayExecutor) -> int:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for i, w in enumerate(ex.worker_states()):
            if w.state == "busy":
                return i
        time.sleep(0.02)
    raise AssertionError("no actor became busy")


def test_a_config_address_of_no_form_ray_takes_is_a_config_error() -> None:
    from drkernel.errors import ConfigError
    from drkernel.executors.ray import check_ray_address

    for address in ("localhost", ":6379", "127.0.0.1:abc", "127.0.0.1:0", "127.0.0.1:99999",
                    "ray://:10001", "ray://127.0.0.1:x"):
        with pytest.raises(ConfigError, match=f"Ray address '{address}': not HOST:PORT"):
            check_ray_address(address)
    for address in ("auto", "local", "anyscale://cluster"):
        check_ray_address(address)  # left to ray.init


def test_a_ray_client_address_where_nothing_listens_is_said_at_once() -> None:
    """ray.init("ray://...") tried a dead Ray Client address for 31 s before its error."""
    import socket

    from drkernel.errors import ExecutorError
    from drkernel.executors.ray import check_ray_address

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        with pytest.raises(ExecutorError, match=f"no Ray cluster at ray://127.0.0.1:{port}"):
            check_ray_address(f"ray://127.0.0.1:{port}", timeout_s=2)  # bound, not listening
        sock.listen()
        check_ray_address(f"ray://127.0.0.1:{port}", timeout_s=2)  # something listens: ray.init's turn


def test_more_actors_than_a_private_cluster_holds_are_refused_at_once(
        caplog: pytest.LogCaptureFixture) -> None:
    """Each judge actor holds a CPU (or a GPU): on a private cluster, more of them than it has would
    wait for a CPU that never comes, the executor with them, start_timeout_s a try (about 30 minutes
    with the defaults, seen as 'starting ray-1: no answer in time'). A shared cluster may grow: a
    warning. No Ray is started here: the plan reads the cluster's resources."""
    from drkernel.errors import ConfigError
    from drkernel.executors.ray import plan_workers

    two_cpus = {"CPU": 2.0}
    assert plan_workers(RayExecutor.Config(), two_cpus, private=True) == (False, 1)
    assert plan_workers(RayExecutor.Config(num_workers=2), two_cpus, private=True) == (False, 2)
    with pytest.raises(ConfigError, match="3 judge actors need a CPU each; the Ray cluster has 2"):
        plan_workers(RayExecutor.Config(num_workers=3), two_cpus, private=True)
    with pytest.raises(ConfigError, match="2 judge actors need a GPU each; the Ray cluster has 1"):
        plan_workers(RayExecutor.Config(num_workers=2), {"CPU": 16.0, "GPU": 1.0}, private=True)
    with pytest.raises(ConfigError, match="the Ray cluster has no GPU"):
        plan_workers(RayExecutor.Config(use_gpus=True), two_cpus, private=True)
    with caplog.at_level("WARNING", logger="drkernel.executors.ray"):
        assert plan_workers(RayExecutor.Config(num_workers=3), two_cpus, private=False) == (False, 3)
    assert "the others wait until nodes join" in caplog.text
