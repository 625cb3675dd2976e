"""The episode runner: a policy plays KernelEnv episodes, many at once, with bounded retries.

run_episode drives one env to its end; run_episodes runs (problem, sample) jobs on a thread pool
and reports each finished Trajectory through a callback as soon as it ends (the bench resume log
relies on that). Infrastructure failures end one episode with `error` set, never the whole run.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field

from drkernel.agent.env import EnvConfig, KernelEnv
from drkernel.agent.policy import Completion, Policy, SamplingParams, token_counter
from drkernel.agent.trajectories import Trajectory
from drkernel.errors import ConfigError, DrKernelError, PolicyError
from drkernel.executors.base import Executor
from drkernel.types import Problem

__all__ = ["LoopConfig", "run_episode", "run_episodes"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class LoopConfig:
    env: EnvConfig = field(default_factory=EnvConfig)
    sampling: SamplingParams = field(default_factory=SamplingParams)
    concurrency: int = 8  # episodes in flight at once
    policy_retries: int = 1  # a failed generate() is retried this many times, with backoff
    # (HTTP backends already retry transient errors themselves)
    retry_backoff_s: float = 2.0
    episode_timeout_s: float | None = None  # checked between turns; the episode is truncated
    model: str | None = None  # recorded in trajectories

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise ConfigError("loop.concurrency: must be >= 1")
        if self.policy_retries < 0:
            raise ConfigError("loop.policy_retries: must be >= 0")


def _generate(
    policy: Policy, messages: list[dict[str, str]], config: LoopConfig, room: int | None = None
) -> Completion:
    """One answer; `room`: the tokens the model's context has left for it (max_tokens is cut to that,
    as the authors' engine does: min(max_model_len - prompt, max_tokens), docs/paper_spec.md §2.7)."""
    sampling = config.sampling
    if room is not None and room < sampling.max_tokens:
        sampling = dataclasses.replace(sampling, max_tokens=room)
    for attempt in range(config.policy_retries + 1):
        try:
            t0 = time.perf_counter()
            completion = policy.generate(messages, 1, sampling)[0]
            completion.extra["generate_s"] = time.perf_counter() - t0
            return completion
        except PolicyError as exc:
            if attempt == config.policy_retries:
                raise
            delay = config.retry_backoff_s * 2**attempt
            log.warning("policy failed (%s); retry %d in %.1fs", exc, attempt + 1, delay)
            time.sleep(delay)
    raise AssertionError("unreachable")


def run_episode(
    env: KernelEnv,
    policy: Policy,
    config: LoopConfig | None = None,
    stop: threading.Event | None = None,
) -> Trajectory:
    """Play one episode to its end. Infrastructure errors are recorded in `trajectory.error`."""
    cfg = config or LoopConfig()
    obs, _ = env.reset()
    traj = env.trajectory
    assert traj is not None
    started = time.monotonic()
    try:
        while not env.done:
            if stop is not None and stop.is_set():
                traj.error = "interrupted"
                break
            if cfg.episode_timeout_s is not None and time.monotonic() - started > cfg.episode_timeout_s:
                traj.truncated = True
                traj.metadata["stopped"] = "episode_timeout"
                break
            if env.prompt_overlong:  # nothing is sent (docs/paper_spec.md §2.7): an empty turn, reward 0,
                completion = Completion(text="", finish_reason="prompt_overlong")  # and the episode ends
            else:
                completion = _generate(policy, obs, cfg, env.answer_room)
            obs = env.step(completion).obs
    except DrKernelError as exc:
        if stop is not None and stop.is_set():  # the run was interrupted: its executor is closing
            traj.error = "interrupted"
        else:
            traj.error = f"{type(exc).__name__}: {exc}"
            log.warning("episode %s ended early: %s", traj.uid, traj.error)
    return traj


def run_episodes(
    jobs: Sequence[tuple[Problem, int]],
    policy: Policy,
    executor: Executor,
    config: LoopConfig | None = None,
    on_done: Callable[[Trajectory], None] | None = None,
) -> list[Trajectory]:
    """Run (problem, sample index) jobs concurrently; results in job order.

    `on_done` is called under a lock, once per episode, as it finishes. On KeyboardInterrupt the
    interrupt is re-raised at once: the episodes in flight stop at their next turn boundary, in the
    background, and are never reported (no `on_done` after this function has returned).
    """
    cfg = config or LoopConfig()
    count = token_counter(policy)
    stop = threading.Event()
    lock = threading.Lock()
    results: list[Trajectory | None] = [None] * len(jobs)

    def one(i: int) -> None:
        problem, sample = jobs[i]
        env = KernelEnv(
            problem, executor, cfg.env, sample=sample, model=cfg.model, count_tokens=count
        )
        traj = run_episode(env, policy, cfg, stop)
        results[i] = traj
        if on_done is not None and traj.error != "interrupted":
            with lock:
                if not stop.is_set():
                    on_done(traj)

    pool = ThreadPoolExecutor(max_workers=cfg.concurrency, thread_name_prefix="episode")
    pending: set[Future[None]] = {pool.submit(one, i) for i in range(len(jobs))}
    try:
        while pending:
            done, pending = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
            for fut in done:
                fut.result()  # re-raise bugs (not infrastructure errors: those are recorded)
    except BaseException:
        with lock:  # an on_done running now ends first; none starts after
            stop.set()
        # no wait for the turns in flight (a model's answer, a judge's verdict: a minute or more);
        # the caller closes the executor, which ends their evaluations
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown(wait=True)
    return [t for t in results if t is not None]
