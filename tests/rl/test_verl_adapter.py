"""The verl adapter against verl itself (skipped when verl is not installed)."""

import numpy as np
import pytest
import torch
from torch.testing import assert_close

pytest.importorskip("verl")

from verl.trainer.ppo import core_algos
from verl.workers.config import ActorConfig

import drkernel.rl.verl as adapter
from drkernel.rl import LossConfig, policy_loss, trloo_advantages

D = torch.float64


def test_registered_under_our_names():
    assert core_algos.get_adv_estimator_fn("drkernel_trloo") is adapter.verl_trloo_advantage
    assert core_algos.get_adv_estimator_fn("drkernel_grpo") is adapter.verl_grpo_advantage
    assert core_algos.get_policy_loss_fn("drkernel") is adapter.verl_policy_loss
    adapter.register()  # idempotent
    assert core_algos.get_policy_loss_fn("drkernel") is adapter.verl_policy_loss


def _rows():
    """2 trajectories of prompt "p" x 2 turns + a third trajectory with 1 turn; rewards on last tokens."""
    index = np.empty(5, dtype=object)
    keys = [("p", 0, 0), ("p", 0, 1), ("p", 1, 0), ("p", 1, 1), ("p", 2, 0)]
    for i, k in enumerate(keys):
        index[i] = k
    rewards = torch.zeros(5, 3, dtype=D)
    rewards[:, -1] = torch.tensor([0.0, 2.0, 1.0, 1.0, 0.0], dtype=D)
    mask = torch.ones(5, 3, dtype=D)
    return rewards, mask, index


def test_multi_turn_trloo_through_verl_registry():
    rewards, mask, index = _rows()
    fn = core_algos.get_adv_estimator_fn("drkernel_trloo")
    adv, ret = fn(token_level_rewards=rewards, response_mask=mask, index=index, config=None)
    # returns: traj0 (2, 2), traj1 (2, 1), traj2 (0,); turn 0 group {2, 2, 0}, turn 1 group {2, 1}
    assert ret[:, 0].tolist() == [2.0, 2.0, 2.0, 1.0, 0.0]
    assert_close(adv[:, 0], torch.tensor([1.0, 1.0, 1.0, -1.0, -2.0], dtype=D), rtol=0, atol=1e-12)
    assert (adv == adv[:, :1]).all()  # broadcast to every response token


def test_plain_uid_index_is_rloo_per_prompt_and_masks_apply():
    rewards = torch.tensor([[0.0, 1.0], [0.0, 0.0], [0.0, 3.0]], dtype=D)
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0], [1.0, 1.0]], dtype=D)
    index = np.array(["a", "a", "b"], dtype=object)
    adv, _ = adapter.verl_trloo_advantage(rewards, mask, index)
    expected = trloo_advantages(rewards.sum(-1), torch.tensor([0, 0, 1]), torch.zeros(3)).view(-1, 1) * mask
    assert_close(adv, expected)


def test_gamma_comes_from_verl_algo_config():
    from verl.trainer.config import AlgoConfig

    rewards, mask, index = _rows()
    _, ret = adapter.verl_trloo_advantage(rewards, mask, index, AlgoConfig(gamma=0.0))
    assert ret[:, 0].tolist() == [0.0, 2.0, 1.0, 1.0, 0.0]


def test_duplicate_turn_rows_are_refused():
    index = np.empty(2, dtype=object)
    index[0], index[1] = ("p", 0, 0), ("p", 0, 0)
    with pytest.raises(ValueError, match="share one"):
        adapter.verl_trloo_advantage(torch.zeros(2, 1), torch.ones(2, 1), index)


def _actor_config(**kw):
    return ActorConfig(
        strategy="fsdp",
        rollout_n=2,
        ppo_micro_batch_size_per_gpu=1,
        clip_ratio_low=0.2,
        clip_ratio_high=0.28,
        **kw,
    )


@pytest.mark.parametrize("mode", ["token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean"])
def test_policy_loss_matches_verl_vanilla(mode):
    gen = torch.Generator().manual_seed(0)
    old = torch.randn(6, 5, generator=gen, dtype=D) * 0.1
    new = old + torch.randn(6, 5, generator=gen, dtype=D) * 0.5
    adv = torch.randn(6, 1, generator=gen, dtype=D).expand(6, 5)
    mask = (torch.rand(6, 5, generator=gen) > 0.3).to(D)
    cfg = _actor_config(loss_agg_mode=mode)
    ours, m1 = adapter.verl_policy_loss(old, new, adv, mask, mode, cfg)
    theirs, m2 = core_algos.get_policy_loss_fn("vanilla")(old, new, adv, mask, mode, cfg)
    # verl divides per-row sums by (tokens + 1e-8) in seq-mean-token-mean; we divide by tokens
    assert_close(ours, theirs, rtol=1e-7 if mode == "seq-mean-token-mean" else 1e-12, atol=1e-12)
    for key, value in m2.items():  # verl computes its clip fractions in float32
        assert m1[key] == pytest.approx(float(value), abs=1e-6)


def test_authors_aggregation_equals_our_default_loss():
    gen = torch.Generator().manual_seed(1)
    old = torch.randn(4, 3, generator=gen, dtype=D) * 0.1
    new = old + torch.randn(4, 3, generator=gen, dtype=D) * 0.3
    adv = torch.randn(4, generator=gen, dtype=D)
    mask = torch.ones(4, 3, dtype=D)
    cfg = _actor_config(loss_agg_mode="seq-mean-token-sum-norm", loss_scale_factor=1000)
    cfg.global_batch_info["loss_scale_factor"] = 1000
    via_verl, _ = adapter.verl_policy_loss(
        old, new, adv.view(-1, 1).expand(4, 3), mask, cfg.loss_agg_mode, cfg
    )
    ours, _ = policy_loss(new, old, adv, mask, LossConfig())
    assert_close(via_verl, ours, rtol=1e-12, atol=1e-15)


def test_grpo_is_mean_only_even_with_verls_std_default():
    from verl.trainer.config import AlgoConfig

    rewards = torch.tensor([[1.0], [0.0], [0.0]], dtype=D)
    mask = torch.ones(3, 1, dtype=D)
    index = np.array(["p", "p", "p"], dtype=object)
    cfg = AlgoConfig(norm_adv_by_std_in_grpo=True)  # verl's default
    adv, _ = core_algos.get_adv_estimator_fn("drkernel_grpo")(rewards, mask, index=index, config=cfg)
    assert_close(adv[:, 0], torch.tensor([2 / 3, -1 / 3, -1 / 3], dtype=D))
    scaled, _ = core_algos.get_adv_estimator_fn("drkernel_grpo_std")(rewards, mask, index=index, config=cfg)
    assert_close(scaled[:, 0], adv[:, 0] / (torch.tensor([1.0, 0.0, 0.0], dtype=D).std() + 1e-6))


def test_an_empty_turn_stays_in_the_baseline_without_gradient():
    """A prompt-overlong turn (no response token) counts in its group's baseline, as in the own trainer."""
    rewards = torch.tensor([[0.0, 3.0], [0.0, 0.0], [0.0, 3.0]], dtype=D)
    mask = torch.tensor([[1.0, 1.0], [0.0, 0.0], [1.0, 1.0]], dtype=D)
    index = np.array(["p", "p", "p"], dtype=object)
    adv, _ = adapter.verl_trloo_advantage(rewards, mask, index)
    assert_close(adv[:, 0], torch.tensor([3.0 - 1.5, 0.0, 3.0 - 1.5], dtype=D))
    assert (adv[1] == 0).all()


def test_baseline_members_is_read_from_the_algorithm_config():
    from omegaconf import OmegaConf

    rewards = torch.tensor([[2.0], [1.0], [0.0]], dtype=D)
    mask = torch.ones(3, 1, dtype=D)
    index = np.array(["p", "p", "p"], dtype=object)
    for members in ("kept", "valid"):
        cfg = OmegaConf.create({"gamma": 1.0, "baseline_members": members})
        adv, _ = adapter.verl_trloo_advantage(rewards, mask, index, config=cfg)
        assert_close(adv[:, 0], torch.tensor([1.5, 0.0, -1.5], dtype=D))  # nothing rejected: same either way
    with pytest.raises(Exception, match="baseline_members"):
        adapter.verl_trloo_advantage(rewards, mask, index,
                                     config=OmegaConf.create({"baseline_members": "all"}))
