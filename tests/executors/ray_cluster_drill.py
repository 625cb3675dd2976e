"""A two-node Ray cluster on loopback (head + one worker node, both 127.0.0.1), with token
authentication on, driven through RayExecutor; run as a child process by test_ray_cluster.py.

Prints one JSON object of observations. Every step has a bound; the cluster is always shut down.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
os.environ["RAY_AUTH_MODE"] = "token"  # the cluster and this driver: token authentication

from ray.cluster_utils import Cluster  # noqa: E402

from drkernel.errors import ExecutorError  # noqa: E402
from drkernel.executors.fake_judge import fake_judge  # noqa: E402
from drkernel.executors.ray import RayExecutor, check_ray_auth  # noqa: E402
from drkernel.types import EvalOptions, EvalRequest  # noqa: E402


def req(code: str, task_id: str) -> EvalRequest:
    return EvalRequest(reference_code="ref", kernel_code=code, task_id=task_id,
                       options=EvalOptions(timeout_s=30))


def main() -> dict[str, object]:
    out: dict[str, object] = {}
    tmp = Path(tempfile.mkdtemp(prefix="drk-ray-drill-"))
    frozen_pids: list[int] = []
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "node_ip_address": "127.0.0.1", "include_dashboard": False})
    try:
        second = cluster.add_node(num_cpus=1, node_ip_address="127.0.0.1")
        cluster.wait_for_nodes(timeout=120)
        # a client without the token: told at once what to set
        env = {k: v for k, v in os.environ.items() if k != "RAY_AUTH_MODE"}
        started = time.monotonic()
        probe = subprocess.run(
            [sys.executable, "-c", "import sys\nfrom drkernel.executors.ray import check_ray_auth\n"
             "try:\n    check_ray_auth(sys.argv[1])\nexcept Exception as exc:\n"
             "    print(exc)\n    sys.exit(4)", cluster.address],
            env=env | {"RAY_AUTH_MODE": "disabled"}, capture_output=True, text=True, timeout=60)
        out["auth_probe"] = {"rc": probe.returncode, "message": probe.stdout.strip(),
                             "seconds": time.monotonic() - started}
        try:
            check_ray_auth(cluster.address)  # with the token: no complaint
            out["auth_ok_with_token"] = True
        except ExecutorError as exc:
            out["auth_ok_with_token"] = str(exc)

        config = RayExecutor.Config(address=cluster.address, num_workers=2, heartbeat_s=0.5,
                                    heartbeat_timeout_s=3.0, start_timeout_s=30.0,
                                    revive_s=2.0)
        with RayExecutor(config, fake_judge) as ex:
            out["nodes_of_workers"] = sorted({w.node_id or "" for w in ex.worker_states()})
            results = ex.evaluate([req("# fake: sleep=0.3\n# fake: speedup=2", f"n{i}")
                                   for i in range(4)])
            out["result_nodes"] = sorted({r.device.node_id for r in results if r.device})
            out["result_hosts"] = sorted({r.device.host for r in results if r.device})
            out["outcomes"] = [r.outcome.value for r in results]

            # a frozen actor (SIGSTOP of its process): replaced, its task retried, reward kept
            marker = tmp / "froze"
            started = time.monotonic()
            (frozen,) = ex.evaluate([req(f"# fake: freeze_once={marker}\n# fake: speedup=3", "f")])
            out["frozen"] = {"outcome": frozen.outcome.value, "speedup": frozen.speedup,
                             "seconds": time.monotonic() - started, "froze": marker.exists(),
                             "restarts": sum(w.restarts for w in ex.worker_states())}
            _wait(lambda: ex.alive_workers() == 2, 30)

            # kill -9 of the second node mid-task: the task is retried on the head's actor
            holder: list = []
            t = threading.Thread(target=lambda: holder.extend(
                ex.evaluate([req("# fake: sleep=4\n# fake: speedup=2", f"k{i}") for i in range(2)])))
            t.start()
            _wait(lambda: sum(w.state == "busy" for w in ex.worker_states()) == 2, 20)
            started = time.monotonic()
            cluster.remove_node(second, allow_graceful=False)
            t.join(timeout=90)
            out["node_loss"] = {"outcomes": [r.outcome.value for r in holder],
                                "seconds": time.monotonic() - started}
            _wait(lambda: ex.alive_workers() < 2 and all(
                w.state != "busy" for w in ex.worker_states()), 30)
            out["alive_after_node_loss"] = ex.alive_workers()
            out["configured"] = ex.capacity

            # a node joins: the dead worker comes back on it (revive_s)
            third = cluster.add_node(num_cpus=1, node_ip_address="127.0.0.1")
            started = time.monotonic()
            _wait(lambda: ex.alive_workers() == 2, 60)
            out["revived"] = {"alive": ex.alive_workers(), "seconds": time.monotonic() - started}

            # the whole node freezes (SIGSTOP of its raylet and its actor): its task is retried
            node_id = third.node_id
            actor_pids = [w.pid for w in ex.worker_states() if w.node_id == node_id and w.pid]
            frozen_pids = actor_pids + [info.process.pid for infos in third.all_processes.values()
                                        for info in infos]
            for pid in frozen_pids:
                with contextlib.suppress(ProcessLookupError):  # a helper that already exited
                    os.kill(pid, signal.SIGSTOP)
            started = time.monotonic()
            results = ex.evaluate([req("# fake: sleep=1\n# fake: speedup=2", f"z{i}")
                                   for i in range(2)])
            out["node_freeze"] = {"outcomes": [r.outcome.value for r in results],
                                  "seconds": time.monotonic() - started,
                                  "actor_on_node": bool(actor_pids),
                                  "ran_on": sorted({r.device.node_id for r in results
                                                    if r.device})}
            out["frozen_node_id"] = node_id
    finally:
        import ray

        for pid in frozen_pids:  # SIGKILL ends stopped processes too
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        ray.shutdown()
        cluster.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def _wait(check, timeout_s: float) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not check() and time.monotonic() < deadline:
        time.sleep(0.1)


if __name__ == "__main__":
    try:
        observed = main()
    except Exception:  # report what broke to the test, which shows it
        import traceback

        observed = {"drill_error": traceback.format_exc()}
    print("DRILL " + json.dumps(observed), flush=True)
