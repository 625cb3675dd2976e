"""The Ray executor: one judge actor per GPU of a Ray cluster (or CPU actors), same seam as local.

Input: a batch of EvalRequests; output: their EvalResults in request order. `ray.init(address)`
joins a cluster (`ray start` on each node is the whole multi-node setup; a cluster with token
authentication is detected before ray.init, with what to set); without an address a private local
cluster bound to 127.0.0.1 is started. A dead actor's task is retried on another; an actor that
stops answering pings (frozen process or node) is replaced and its task retried (pool.py).
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from drkernel.errors import ConfigError, EvalTimeout, ExecutorError, WorkerLost
from drkernel.executors.judge_host import (
    JudgeFactory,
    gpu_lock,
    judge_call,
    mark_host_process,
    pool_judge,
)
from drkernel.executors.pool import Slot, SlotPool
from drkernel.settings import JudgeSettings
from drkernel.types import EvalRequest, EvalResult

__all__ = ["RAY_START_HELP", "RayExecutor", "check_ray_address", "check_ray_auth", "plan_workers",
           "ray_errors"]

logger = logging.getLogger(__name__)


def _loopback_default() -> None:
    """Ray reads this when it is first imported: with it, a cluster started for 127.0.0.1 binds
    every server (GCS, raylet, workers, agents) to loopback instead of all interfaces. Set before
    this module first imports Ray, not when it is imported: executors/build.py names every
    executor's Config, and naming one must not change the environment of the process (a Ray
    cluster that a trainer starts later would refuse other nodes)."""
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")


@contextlib.contextmanager
def ray_errors(what: str) -> Iterator[None]:
    """Translate Ray's exceptions into the ExecutorError tree at the seam (one place)."""
    _loopback_default()
    import ray.exceptions as rex

    try:
        yield
    except (rex.RayActorError, rex.ActorUnavailableError, rex.WorkerCrashedError) as exc:
        raise WorkerLost(f"{what}: {type(exc).__name__}: {exc}") from exc
    except rex.GetTimeoutError as exc:
        raise EvalTimeout(f"{what}: no answer in time") from exc
    except rex.RayTaskError as exc:  # the judge raised inside the actor: the actor is broken
        raise WorkerLost(f"{what}: judge raised: {exc}") from exc
    except (rex.RayError, ConnectionError) as exc:
        raise ExecutorError(f"{what}: {type(exc).__name__}: {exc}") from exc


_AUTH_HELP = (
    "the Ray cluster at {address} requires token authentication (Ray's RAY_AUTH_MODE=token) "
    "and this process has no valid token: set RAY_AUTH_MODE=token and give it the cluster's "
    "token, in RAY_AUTH_TOKEN, in a file named by RAY_AUTH_TOKEN_PATH, or in ~/.ray/auth_token "
    "(copy it from the head node: `ray get-auth-token`); see docs/service.md, 'Ray'. Ray said: "
    "{detail}"
)

_PROBE = """
import sys
from ray._raylet import GcsClient
try:
    GcsClient(address=sys.argv[1]).internal_kv_get(b"drkernel-probe", None, timeout=5)
except Exception as exc:
    print(type(exc).__name__ + ": " + str(exc).splitlines()[0][:400])
    sys.exit(3)
"""


def _token_available(env: dict[str, str]) -> bool:
    if env.get("RAY_AUTH_TOKEN") or env.get("RAY_AUTH_TOKEN_PATH"):
        return True
    return (Path.home() / ".ray" / "auth_token").is_file()


RAY_START_HELP = ("start one with `ray start --head` (and `ray start --address HEAD:6379` on the other "
                  "nodes), or leave out --address for a private one on this machine")


def check_ray_address(address: str, timeout_s: float = 10.0) -> None:
    """An address "HOST:PORT" where nothing listens raises ExecutorError at once (ray.init, and a GCS
    probe, wait 40 s or more for it); one of no form Ray takes ("localhost", ":6379", "HOST:abc")
    raises ConfigError (ray.init's ValueError came after the probes, as a traceback). A Ray Client
    address "ray://HOST[:PORT]" is probed the same way (ray.init tried it for 31 s); "auto" and other
    schemes are left to ray.init."""
    if address in ("auto", "local"):
        return
    if "://" in address:  # Ray Client: ray://HOST[:PORT], port 10001 unless said; other schemes: ray.init's
        scheme, _, rest = address.partition("://")
        if scheme != "ray":
            return
        host, colon, port = rest.split("/", 1)[0].rpartition(":")
        host, port = (host, port) if colon else (port, "10001")
    else:
        host, _, port = address.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"Ray address {address!r}: not HOST:PORT (the head's GCS, e.g. 10.0.0.1:6379), "
                          "auto or ray://HOST:PORT")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except OSError as exc:
        raise ExecutorError(f"no Ray cluster at {address} ({exc.strerror or type(exc).__name__}): "
                            f"{RAY_START_HELP}") from None


def check_ray_auth(address: str, timeout_s: float = 10.0) -> None:
    """Ask the cluster's GCS once, in a child process with the environment ray.init would use,
    whether we may connect: a missing or wrong token raises ExecutorError at once (ray.init
    itself retries InvalidAuthToken for 20 s, then says only "Failed to connect")."""
    _loopback_default()
    env = dict(os.environ)
    if "RAY_AUTH_MODE" not in env and _token_available(env):
        env["RAY_AUTH_MODE"] = "token"  # what ray.init does when a token is at hand
    try:
        probe = subprocess.run([sys.executable, "-c", _PROBE, address], env=env, text=True,
                               capture_output=True, timeout=timeout_s, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return  # no answer in time: ray.init reports the address problem itself
    detail = probe.stdout.strip()
    if probe.returncode == 3 and ("AuthenticationError" in detail or "InvalidAuthToken" in detail):
        raise ExecutorError(_AUTH_HELP.format(address=address, detail=detail))


class _JudgeActor:
    """Body of a Ray actor owning one judge. On a GPU actor the device is the physical index.

    Two threads (max_concurrency=2): `evaluate` runs one task at a time (the pool sends one), and
    `ping` answers meanwhile, so a frozen actor or node is told apart from a long evaluation.
    """

    def __init__(self, factory: JudgeFactory, device: str | None, lock_timeout_s: float) -> None:
        import ray

        mark_host_process()
        if device is None:  # a GPU actor: address the GPU Ray gave us by its physical index
            gpu = int(ray.get_gpu_ids()[0])
            os.environ.pop("CUDA_VISIBLE_DEVICES", None)
            device = f"cuda:{gpu}"
        self.device = device
        self._gpu = gpu_lock(device, lock_timeout_s)
        self._judge = factory(device)
        context = ray.get_runtime_context()
        self._where = {"device": device, "pid": os.getpid(), "host": socket.gethostname(),
                       "node_id": context.get_node_id()}

    def info(self) -> dict[str, Any]:
        return dict(self._where)

    def ping(self) -> bool:
        return True

    def evaluate(self, request: dict[str, Any]) -> dict[str, Any]:
        return judge_call(self._judge, EvalRequest.from_dict(request)).to_dict()


def plan_workers(config: RayExecutor.Config, resources: dict[str, float], private: bool) -> tuple[bool, int]:
    """(whether the actors take GPUs, how many actors) for a cluster of `resources`. A GPU actor holds
    one GPU, a CPU actor one CPU. On a `private` cluster (started here, no node joins later) more
    actors than it has of either is a ConfigError now: the extra ones would wait for a CPU or GPU that
    never comes, and the executor with them, start_timeout_s a try (half an hour by default). A shared
    cluster may grow, so there it is a warning."""
    gpus, cpus = int(resources.get("GPU", 0)), int(resources.get("CPU", 0))
    use_gpus = config.use_gpus if config.use_gpus is not None else gpus > 0
    if use_gpus and gpus == 0:
        raise ConfigError("executor.use_gpus: the Ray cluster has no GPU")
    count = config.num_workers or (gpus if use_gpus else max(1, (cpus or 2) // 2))
    have, what = (gpus, "GPU") if use_gpus else (cpus, "CPU")
    if count > have:
        why = (f"executor.num_workers: {count} judge actors need a {what} each; the Ray cluster has "
               f"{have}")
        if private:
            raise ConfigError(why + (" (fewer workers, or more num_cpus for the private cluster)"
                                     if not use_gpus else ""))
        logger.warning("%s: the others wait until nodes join", why)
    return use_gpus, count


class RayExecutor(SlotPool):
    """A pool of Ray actors, each owning one judge; `evaluate` is thread-safe."""

    @dataclass(frozen=True, kw_only=True, slots=True)
    class Config:
        address: str | None = None  # None: start a private cluster on 127.0.0.1
        num_workers: int | None = None  # None: one per cluster GPU, else CPUs // 2
        use_gpus: bool | None = None  # None: when the cluster has GPUs
        num_cpus: int | None = None  # CPUs of the private local cluster
        max_attempts: int = 3
        start_timeout_s: float = 600.0
        acquire_timeout_s: float = 6 * 3600.0
        deadline_factor: float = 3.0
        deadline_grace_s: float = 60.0
        heartbeat_s: float = 5.0  # while a task runs, its actor is pinged this often ...
        heartbeat_timeout_s: float = 15.0  # ... and is frozen when a ping takes longer than this
        liveness_s: float = 5.0  # idle actors are pinged this often, and replaced if dead (0: never)
        judge_retries: int = 1  # extra tries after a frozen actor (a judge_error: judge.retries)
        revive_s: float = 30.0  # a worker that failed 3 starts is tried again this often
        gpu_lock_timeout_s: float = 30.0
        connect_timeout_s: float = 10.0  # probe of a cluster address before ray.init
        namespace: str = "drkernel"
        judge: JudgeSettings = JudgeSettings()  # how each actor's judge is built

        def __post_init__(self) -> None:
            if self.num_workers is not None and self.num_workers < 1:
                raise ConfigError("executor.num_workers: must be >= 1")
            if self.max_attempts < 1:
                raise ConfigError("executor.max_attempts: must be >= 1")

        def build(self, judge_factory: JudgeFactory | None = None) -> RayExecutor:
            return RayExecutor(self, judge_factory)

    def __init__(self, config: Config | None = None, judge_factory: JudgeFactory | None = None):
        _loopback_default()
        import ray as ray_module

        ray: Any = ray_module  # Ray's stubs lack actor options such as max_concurrency

        self.config = config or RayExecutor.Config()
        self._factory = judge_factory or pool_judge(self.config.judge)
        self.max_attempts = self.config.max_attempts
        self.judge_retries = self.config.judge_retries
        self.revive_s = self.config.revive_s
        self.liveness_s = self.config.liveness_s
        self.acquire_timeout_s = self.config.acquire_timeout_s
        self.deadline_factor = self.config.deadline_factor
        self.deadline_grace_s = self.config.deadline_grace_s
        self._owns_ray = not ray.is_initialized()
        with ray_errors("ray.init"):
            if self._owns_ray:
                self._init_ray()
            try:
                use_gpus, count = plan_workers(self.config, ray.cluster_resources(),
                                               private=self._owns_ray and not self.config.address)
            except ConfigError:
                if self._owns_ray:  # the cluster this executor started goes with it
                    ray.shutdown()
                raise
        options: dict[str, Any] = {"num_gpus": 1, "num_cpus": 0} if use_gpus else {"num_cpus": 1}
        self._actor_cls = ray.remote(max_restarts=0, max_concurrency=2, **options)(_JudgeActor)
        self._use_gpus = use_gpus
        self._init_pool([Slot(f"ray-{i}", "?") for i in range(count)])

    def _init_ray(self) -> None:
        import ray

        if self.config.address:
            check_ray_address(self.config.address, self.config.connect_timeout_s)
            check_ray_auth(self.config.address, self.config.connect_timeout_s)
        kwargs: dict[str, Any] = dict(
            namespace=self.config.namespace, include_dashboard=False, log_to_driver=False,
            configure_logging=False,
        )
        if self.config.address:
            try:
                ray.init(address=self.config.address, **kwargs)
            except ValueError as exc:  # an address of a form Ray does not take
                raise ConfigError(f"Ray address {self.config.address!r}: {exc}") from None
        else:
            # address="local": always a new private cluster, never one that `ray start` left
            # running on this machine (ray.init() alone would join it)
            ray.init(address="local", num_cpus=self.config.num_cpus,
                     _node_ip_address="127.0.0.1", **kwargs)

    def _require_live(self) -> None:
        """Refuse Ray calls after close() or ray.shutdown(): a background restart would make Ray
        auto-initialise (join or even start a cluster) from a dying executor."""
        import ray

        if self._closed or not ray.is_initialized():
            raise ExecutorError("the Ray executor is closed")

    def _spawn(self, slot: Slot) -> Any:
        import ray

        self._require_live()
        actor = self._actor_cls.remote(self._factory, None if self._use_gpus else "cpu",
                                       self.config.gpu_lock_timeout_s)
        try:
            with ray_errors(f"starting {slot.state.worker_id}"):
                where = ray.get(actor.info.remote(), timeout=self.config.start_timeout_s)
        except ExecutorError:
            self._kill(actor)
            raise
        slot.state.device, slot.state.pid = where["device"], where["pid"]
        slot.state.host, slot.state.node_id = where["host"], where["node_id"]
        return actor

    def _call(self, slot: Slot, request: EvalRequest, deadline_s: float) -> EvalResult:
        """Run on the actor; ping it every heartbeat_s meanwhile (a frozen one raises EvalTimeout)."""
        import ray

        cfg = self.config
        end = time.monotonic() + deadline_s
        self._require_live()
        with ray_errors(f"actor {slot.state.worker_id}"):
            ref = slot.handle.evaluate.remote(request.to_dict())
            while True:
                left = end - time.monotonic()
                if left <= 0:
                    raise EvalTimeout(f"actor {slot.state.worker_id} gave no answer in "
                                      f"{deadline_s:.0f} s")
                ready, _ = ray.wait([ref], timeout=min(cfg.heartbeat_s, left))
                if ready:
                    return EvalResult.from_dict(ray.get(ref))
                try:
                    ray.get(slot.handle.ping.remote(), timeout=cfg.heartbeat_timeout_s)
                except ray.exceptions.GetTimeoutError:
                    raise EvalTimeout(
                        f"actor {slot.state.worker_id} (pid {slot.state.pid}, node "
                        f"{slot.state.node_id}) is frozen: no answer to a ping in "
                        f"{cfg.heartbeat_timeout_s:g} s") from None

    def _kill(self, handle: Any) -> bool:
        import ray

        if not ray.is_initialized():  # Ray is gone, and its actors with it
            return False
        try:
            ray.kill(handle, no_restart=True)
        except Exception:  # already gone, or Ray is shutting down: nothing left to kill
            return False
        return True

    def _dispose(self, handle: Any) -> None:
        self._kill(handle)

    def _check(self, handle: Any) -> str | None:
        """None when the idle actor answers a ping within heartbeat_timeout_s."""
        import ray

        if self._closed or not ray.is_initialized():
            return None  # closing: nothing to replace
        try:
            with ray_errors("ping"):
                ray.get(handle.ping.remote(), timeout=self.config.heartbeat_timeout_s)
        except (WorkerLost, EvalTimeout, ExecutorError) as exc:
            return str(exc)
        return None

    def close(self) -> None:
        import ray

        was_closed = self._closed
        super().close()
        if not was_closed and self._owns_ray and ray.is_initialized():
            ray.shutdown()

    def __enter__(self) -> RayExecutor:
        return self
