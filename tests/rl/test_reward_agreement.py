"""Issue 19, item 1: the reward the agent sees and the reward the trainer trains on are one number.

Before, `--set judge.eval.speedup_cap=5` reached the judge (and the agent's result.reward) but the
trainer recomputed the reward from the preset name alone (cap 3, coverage weight 1): for a correct
kernel at speedup 4 and coverage 1 the agent saw 1 + 4 + 0.5 = 5.5 and the trainer trained on 5.0.
"""

import pytest
import torch

from drkernel.agent.env import EnvConfig, KernelEnv
from drkernel.agent.policy import Completion
from drkernel.executors.fake import FakeExecutor, scripted_result
from drkernel.recipes import debug_cpu
from drkernel.reward import REWARD_PRESETS, reward_config
from drkernel.rl import turn_rewards
from drkernel.rl.config import TinyModelConfig, apply_overrides
from drkernel.rl.step import prepare_step
from drkernel.rl.tiny import build_tiny
from drkernel.rl.trainer import Trainer
from drkernel.types import EvalOptions, Problem

FAST = "```python\nclass ModelNew:\n    pass\n# fake: speedup=4.0\n# fake: coverage=1.0\n```"
BAD = "```python\nclass ModelNew:\n    pass\n# fake: incorrect\n```"
PROBLEM = Problem(name="P", reference_code="# PROBLEM_P\nclass Model:\n    pass\n")

# preset -> the turn reward of FAST with speedup_cap=5 and coverage_weight=0.5
EXPECTED = {
    "paper": 1.0 + 4.0 + 0.5,  # C(1 + min(s, 5) + 0.5·PR)
    "released": 0.5 * (1.0 + 4.0 + 0.5),
    "eval": 0.5 * (1.0 + 4.0),  # no PR term
    "correctness_speedup": 1.0 + 4.0,
}


class Sampler:
    """Sample 0 answers FAST at every turn, sample 1 an incorrect kernel."""

    def count_tokens(self, text):
        return len(text.split())

    def sample(self, conversations, sampling):
        return [Completion(text=FAST if i % 2 == 0 else BAD, finish_reason="stop", token_ids=[7, 8, 9],
                           extra={"prompt_ids": [3, 4, 5, 6]}) for i in range(len(conversations))]


@pytest.mark.parametrize("preset", sorted(EXPECTED))
def test_the_agent_and_the_trainer_agree_with_a_cap_of_5(tmp_path, preset):
    cfg = apply_overrides(debug_cpu(), [
        "rollout.n=2", "trainer.prompts_per_step=1", "trainer.steps=1", "trainer.validate_every=0",
        "judge.executor=fake", "rollout.cache_evaluations=false", "log.tensorboard=false",
        f"reward={preset}", "reward.speedup_cap=5",
        f"reward.coverage_weight={REWARD_PRESETS[preset].coverage_weight * 0.5}",
    ])
    model, tok = build_tiny(TinyModelConfig(), {"x": {"honest": "class ModelNew: pass"}}, seed=0)
    executor = FakeExecutor()
    with Trainer(cfg, tmp_path, model=model, tokenizer=tok, problems=[PROBLEM], validation=[],
                 executor=executor, sampler=Sampler()) as tr:
        batch, _ = tr._rollouts()
        t = prepare_step(batch, tr._pick_groups(batch), tr.model, tr.tokenizer, tr.config, step=1)
    want = EXPECTED[preset]
    # what the judge (here the fake executor) reports for each request the agent sent
    judged = [scripted_result(r) for r in executor.calls]
    assert sorted({r.reward for r in judged}) == sorted({0.0, want})
    assert all(reward_config(r.options) == cfg.reward for r in executor.calls)
    assert {r.options.reward_preset for r in executor.calls} == {preset}
    # what the agent sees (result.reward, the turn's reward) and what the trainer trains on
    for i, traj in enumerate(batch.trajectories):
        good = "speedup=4.0" in (traj.turns[0].code or "")
        for j, turn in enumerate(traj.turns):
            assert turn.reward == turn.result.reward == (want if good else 0.0)
            assert t.rewards.rewards[i, j].item() == pytest.approx(turn.reward, abs=1e-6)
    assert t.rewards.rewards.max().item() == pytest.approx(want, abs=1e-6)
    # the run's RewardConfig is the one the judge's options give
    assert cfg.reward == reward_config(cfg.eval_options())
    if preset == "paper":  # the old recomputation (preset only: cap 3, weight 1) trained on 5.0
        assert turn_rewards(batch.results(), "paper").rewards.max().item() == 5.0


def test_the_env_and_turn_rewards_agree_for_any_options():
    opts = EvalOptions(speedup_cap=5.0, coverage_weight=0.5)
    env = KernelEnv(PROBLEM, FakeExecutor(), EnvConfig(max_turns=2, eval_options=opts))
    env.reset()
    step = env.step(FAST)
    result = step.info["result"]
    assert step.reward == result.reward == 5.5
    assert turn_rewards([[result]], reward_config(opts)).rewards.tolist() == [[5.5]]
    assert env.step(BAD).reward == 0.0


def test_the_env_rewards_the_facts_not_a_stale_reward():
    """A result whose reward was computed under other options (a cache, an older judge) is rewarded
    again from its facts under the env's own options."""

    def stale(request):
        r = scripted_result(request)
        r.reward = 123.0
        return r

    opts = EvalOptions(reward_preset="released", speedup_cap=5.0, coverage_weight=0.5)
    env = KernelEnv(PROBLEM, FakeExecutor(stale), EnvConfig(max_turns=1, eval_options=opts))
    env.reset()
    step = env.step(FAST)
    assert step.reward == step.info["result"].reward == 2.75
    assert torch.equal(turn_rewards([[step.info["result"]]], reward_config(opts)).rewards,
                       torch.tensor([[2.75]]))
