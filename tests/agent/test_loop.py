import threading
import time

from drkernel.agent.env import EnvConfig, KernelEnv
from drkernel.agent.loop import LoopConfig, run_episode, run_episodes
from drkernel.agent.policy import ScriptedPolicy
from drkernel.errors import PolicyError
from drkernel.executors.fake import FakeExecutor
from drkernel.types import Problem

PROBLEMS = [Problem(name=f"p{i}", reference_code=f"class Model: pass  # {i}\n") for i in range(3)]


def answer(mark):
    return f"```python\nclass ModelNew: pass  # fake: {mark}\n```"


def test_many_episodes_concurrently_each_reported_once():
    policy = ScriptedPolicy([answer("incorrect"), answer("speedup=1.3"), answer("speedup=2.5")])
    seen = []
    jobs = [(p, s) for p in PROBLEMS for s in range(4)]
    cfg = LoopConfig(env=EnvConfig(max_turns=3), concurrency=4)
    trajs = run_episodes(jobs, policy, FakeExecutor(), cfg, on_done=seen.append)
    assert [t.uid for t in trajs] == [f"{p.name}#{s}" for p, s in jobs]
    assert sorted(t.uid for t in seen) == sorted(t.uid for t in trajs)
    assert all(len(t.turns) == 3 and t.truncated and t.error is None for t in trajs)
    assert len(policy.calls) == 36


def test_episodes_really_overlap():
    active, peak, lock = [0], [0], threading.Lock()

    def script(messages, i):
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        time.sleep(0.05)
        with lock:
            active[0] -= 1
        return answer("speedup=1")

    jobs = [(PROBLEMS[0], s) for s in range(8)]
    run_episodes(jobs, ScriptedPolicy(script), FakeExecutor(),
                 LoopConfig(env=EnvConfig(max_turns=1), concurrency=4))
    assert peak[0] >= 3


def test_policy_failures_are_retried_then_recorded():
    cfg = LoopConfig(env=EnvConfig(max_turns=2), policy_retries=2, retry_backoff_s=0.0)
    policy = ScriptedPolicy([answer("speedup=1")], fail_first=2)
    traj = run_episode(KernelEnv(PROBLEMS[0], FakeExecutor(), cfg.env), policy, cfg)
    assert traj.error is None and len(traj.turns) == 2

    class Down:
        def generate(self, messages, n=1, sampling=None):
            raise PolicyError("503 forever")

    traj = run_episode(KernelEnv(PROBLEMS[0], FakeExecutor(), cfg.env), Down(), cfg)
    assert traj.error.startswith("PolicyError") and traj.turns == []


def test_episode_timeout_truncates_between_turns():
    def slow(messages, i):
        time.sleep(0.15)
        return answer("speedup=1")

    cfg = LoopConfig(env=EnvConfig(max_turns=10), episode_timeout_s=0.2)
    traj = run_episode(KernelEnv(PROBLEMS[0], FakeExecutor(), cfg.env), ScriptedPolicy(slow), cfg)
    assert 1 <= len(traj.turns) < 10 and traj.truncated
    assert traj.metadata["stopped"] == "episode_timeout" and traj.error is None


def test_model_name_is_recorded():
    cfg = LoopConfig(env=EnvConfig(max_turns=1), model="m-7b")
    [traj] = run_episodes([(PROBLEMS[0], 0)], ScriptedPolicy([answer("speedup=1")]), FakeExecutor(), cfg)
    assert traj.model == "m-7b"


def test_interrupt_stops_in_flight_episodes_without_reporting_them():
    import pytest

    calls = {"n": 0}
    lock = threading.Lock()

    def script(messages, i):
        with lock:
            calls["n"] += 1
            n = calls["n"]
        if n == 7:
            raise KeyboardInterrupt  # as if Ctrl-C arrived while this episode was generating
        time.sleep(0.02)
        return answer("speedup=1")

    seen = []
    jobs = [(PROBLEMS[0], s) for s in range(20)]
    cfg = LoopConfig(env=EnvConfig(max_turns=3), concurrency=2)
    with pytest.raises(KeyboardInterrupt):
        run_episodes(jobs, ScriptedPolicy(script), FakeExecutor(), cfg, on_done=seen.append)
    assert 1 <= len(seen) < 20
    assert all(len(t.turns) == 3 and t.error is None for t in seen)  # only whole episodes
    assert calls["n"] < 3 * 20
