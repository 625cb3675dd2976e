import pytest

from drkernel.agent.env import EnvConfig, KernelEnv
from drkernel.agent.policy import Completion
from drkernel.agent.tts import ContextConfig
from drkernel.errors import ConfigError, ExecutorError
from drkernel.executors.fake import FakeExecutor, scripted_result
from drkernel.types import EvalOptions, EvalOutcome, EvalResult, Problem

PROBLEM = Problem(name="p", reference_code="class Model: pass\ndef get_inputs(): return []\n")


def code(mark: str) -> str:
    return f"```python\nclass ModelNew:\n    pass  # fake: {mark}\n```"


def test_episode_runs_to_the_turn_budget_like_the_authors():
    ex = FakeExecutor()
    env = KernelEnv(PROBLEM, ex, EnvConfig(max_turns=3))
    obs, info = env.reset()
    assert len(obs) == 1 and obs[0]["role"] == "user" and info["prompt_tokens"] > 0
    r1 = env.step(code("compile_error"))
    assert (r1.reward, r1.terminated, r1.truncated) == (0.0, False, False)
    assert [m["role"] for m in r1.obs] == ["user", "assistant", "user"]
    assert "fake compile error" in r1.obs[-1]["content"]
    r2 = env.step(code("speedup=2.0"))
    assert r2.reward > 0 and not r2.truncated
    r3 = env.step(code("hack=decoy_kernel"))
    assert r3.truncated and not r3.terminated and r3.obs == [] and r3.reward == 0.0
    traj = env.trajectory
    assert [t.result.outcome for t in traj.turns] == [
        EvalOutcome.COMPILE_ERROR, EvalOutcome.OK, EvalOutcome.HACK_DETECTED
    ]
    assert traj.truncated and traj.best_turn().index == 1
    assert [c.task_id for c in ex.calls] == ["p#0/t0", "p#0/t1", "p#0/t2"]
    with pytest.raises(RuntimeError):
        env.step("more")


def test_an_episode_id_keeps_task_ids_apart_across_steps():
    """verl's later steps judge the same problem and sample again: the prompt's uid keeps the ids apart."""
    ex = FakeExecutor()
    ids = []
    for episode in ("u1", "u2"):
        env = KernelEnv(PROBLEM, ex, EnvConfig(max_turns=1), sample=2,
                        episode=episode)
        env.reset()
        env.step(code("speedup=2.0"))
        ids.append(ex.calls[-1].task_id)
    assert ids == ["p#u1.2/t0", "p#u2.2/t0"]


def test_no_code_turn_never_reaches_the_executor():
    ex = FakeExecutor()
    env = KernelEnv(PROBLEM, ex, EnvConfig(max_turns=2))
    env.reset()
    step = env.step("I would rather not write code.")
    assert ex.calls == []
    turn = step.info["turn"]
    assert turn.code is None and turn.result.error.kind == "no_code"
    assert "no code block" in step.obs[-1]["content"]


def test_stop_at_speedup_terminates():
    env = KernelEnv(PROBLEM, FakeExecutor(), EnvConfig(max_turns=5, stop_at_speedup=1.5))
    env.reset()
    assert not env.step(code("speedup=1.2")).terminated
    r = env.step(code("speedup=1.6"))
    assert r.terminated and not r.truncated and env.done


def test_logprobs_and_context_are_recorded():
    cfg = EnvConfig(max_turns=6, context=ContextConfig(mode="top_w", w=2))
    env = KernelEnv(PROBLEM, FakeExecutor(), cfg)
    env.reset()
    for s in ("1.1", "3.0", "1.2", "2.0"):
        env.step(Completion(text=code(f"speedup={s}"), logprobs=[-0.1, -0.2], tokens=["a", "b"]))
    turns = env.trajectory.turns
    assert turns[0].logprobs == [-0.1, -0.2]
    assert turns[0].context == [] and turns[1].context == [0] and turns[2].context == [0, 1]
    assert turns[3].context == [1, 2]  # top-2 by reward among turns 0..2
    assert all(t.prompt_tokens > 0 for t in turns)


def test_hacked_turn_earns_nothing_even_if_the_result_has_a_reward():
    def handler(req):
        r = scripted_result(req)
        r.hacks, r.reward = ["timing_anomaly"], 5.0
        return r

    env = KernelEnv(PROBLEM, FakeExecutor(handler), EnvConfig(max_turns=1))
    env.reset()
    assert env.step(code("speedup=2")).reward == 0.0


def test_the_env_retries_nothing_the_executor_is_the_one_retry_layer():
    """One call per turn: the executor's pool has retried a faulty judge already. An infra_error left
    after that is no verdict: the episode ends (ExecutorError), so no turn is rewarded 0 for it."""
    calls = {"n": 0}

    def infra(req):
        calls["n"] += 1
        return EvalResult.failure(EvalOutcome.INFRA_ERROR, "reference_error", "reference failed")

    env = KernelEnv(PROBLEM, FakeExecutor(infra), EnvConfig(max_turns=1))
    env.reset()
    with pytest.raises(ExecutorError, match="no verdict for .*reference_error: reference failed"):
        env.step(code("speedup=1.0"))
    assert calls["n"] == 1 and env.trajectory is not None and env.trajectory.turns == []

    def dead(req):
        calls["n"] += 1
        raise ExecutorError("down")

    env = KernelEnv(PROBLEM, FakeExecutor(dead), EnvConfig(max_turns=1))
    env.reset()
    with pytest.raises(ExecutorError):
        env.step(code("speedup=1.0"))
    assert calls["n"] == 2


def test_eval_options_reach_the_executor():
    ex = FakeExecutor()
    opts = EvalOptions(reference_backend="compile", num_perf_trials=7)
    env = KernelEnv(Problem(name="q", reference_code="x", entry_point="Net"), ex,
                    EnvConfig(eval_options=opts))
    env.reset()
    env.step("```python\nclass NetNew: pass  # fake: speedup=1\n```")
    req = ex.calls[0]
    assert req.options.reference_backend == "compile" and req.options.num_perf_trials == 7
    assert req.options.entry_point == "Net" and req.problem_name == "q"


def test_config_validation():
    with pytest.raises(ConfigError):
        EnvConfig(max_turns=0)


def test_prompt_overlong_turn_is_empty_with_reward_zero_and_ends_the_episode():
    env = KernelEnv(PROBLEM, FakeExecutor(), EnvConfig(max_turns=2))
    env.reset()
    step = env.step(Completion(text="", finish_reason="prompt_overlong"))
    assert step.reward == 0.0 and step.info["result"].error.kind == "prompt_overlong"
    assert "context" in env.trajectory.turns[0].feedback
    # the authors' engine ends the episode there (docs/paper_spec.md §2.7): the next prompt only grows
    assert env.done and step.truncated and not step.terminated and step.obs == []


class _HeldOutHack:
    """A judge whose verdict saw a hack only during the held-out runs (after a correct main run)."""

    def __init__(self):
        self.requests = []

    def evaluate(self, requests):
        self.requests.extend(requests)
        return [EvalResult(outcome=EvalOutcome.HACK_DETECTED, compiled=True, correct=False, speedup=1.8,
                           hacks=["input_mutation"],
                           hack_details={"input_mutation": "the submission modified its inputs in place"},
                           shape_variants_passed=1, shape_variants_total=2,
                           shape_variant_issues=["variant 2: output differs: batch_size = 9"])]

    def close(self):
        pass


def test_a_hack_seen_on_a_held_out_shape_is_a_hack_and_the_shapes_stay_unseen():
    ex = _HeldOutHack()
    problem = Problem(name="p", reference_code=PROBLEM.reference_code, shape_variants=("batch_size = 9",))
    env = KernelEnv(problem, ex, EnvConfig(max_turns=2, held_out=True))
    env.reset()
    step = env.step(code("x"))
    assert ex.requests[0].shape_variants == ("batch_size = 9",)
    assert step.reward == 0.0 and not env.trajectory.turns[0].correct
    feedback = step.obs[-1]["content"]
    assert "input_mutation" in feedback and "Leave the inputs unchanged" in feedback
    for secret in ("variant", "batch_size", "held", "shape", "1/2", "in place"):
        assert secret not in feedback, secret
