"""Golden table for the clipped policy loss and every aggregation mode (docs/paper_spec.md §5.5)."""

import math

import pytest
import torch
from torch.testing import assert_close

from drkernel.errors import ConfigError
from drkernel.rl import LossConfig, aggregate_loss, policy_loss, ppo_token_losses

D = torch.float64
# 4 turn-samples x 3 tokens: ratio pi / pi_old per token, one advantage per turn-sample.
RATIO = torch.tensor([[1.5, 0.5, 1.1], [0.5, 3.5, 1.2], [4.0, 1.0, 1.0], [1.0, 1.0, 1.0]], dtype=D)
ADV = torch.tensor([1.0, -1.0, -2.0, 5.0], dtype=D)
MASK = torch.tensor([[1, 1, 1], [1, 1, 1], [1, 0, 0], [0, 0, 0]])
OLD = torch.zeros(4, 3, dtype=D)
LOGP = RATIO.log()
# Hand-computed: A>0: max(-A r, -A clip(r, 0.8, 1.28)); A<0: that, capped at -A * 3.
TOKEN_LOSS = [
    [-1.28, -0.5, -1.1],  # 1.5 clipped to 1.28; 0.5 not clipped for A > 0
    [0.8, 3.0, 1.2],  # 0.5 clipped to 0.8; 3.5 capped by the dual clip at 3
    [6.0, 2.0, 2.0],  # 4.0 -> 8 capped at 6 (the masked tokens are not counted)
    [-5.0, -5.0, -5.0],
]


def test_token_losses_golden():
    loss, _, clipped, dual = ppo_token_losses(LOGP, OLD, ADV.view(-1, 1))
    assert_close(loss, torch.tensor(TOKEN_LOSS, dtype=D), rtol=0, atol=1e-12)
    assert clipped.tolist() == [
        [True, False, False],
        [True, False, False],
        [False, False, False],
        [False] * 3,
    ]
    assert dual.tolist() == [[False] * 3, [False, True, False], [True, False, False], [False] * 3]


def test_without_dual_clip_negative_advantages_are_unbounded():
    loss, *_ = ppo_token_losses(LOGP, OLD, ADV.view(-1, 1), dual_clip=None)
    assert loss[1, 1].item() == pytest.approx(3.5) and loss[2, 0].item() == pytest.approx(8.0)


# valid rows 0-2: token sums -2.88, 5.0, 6.0 (7 valid tokens, total 8.12)
@pytest.mark.parametrize(
    ("agg", "expected"),
    [
        ("seq-mean-token-sum", 8.12 / 3 / 1000),  # the authors' mode: / loss_scale_factor 1000
        ("seq-mean-token-mean", (-2.88 / 3 + 5.0 / 3 + 6.0) / 3),
        ("token-mean", 8.12 / 7),
        ("token-sum", 8.12),
    ],
)
def test_policy_loss_aggregation_golden(agg, expected):
    loss, metrics = policy_loss(LOGP, OLD, ADV, MASK, LossConfig(agg=agg))
    assert loss.item() == pytest.approx(expected, abs=1e-12)
    assert metrics["pg_clipfrac"] == pytest.approx(2 / 7)
    assert metrics["pg_clipfrac_lower"] == pytest.approx(2 / 7)


def test_explicit_scale_factor_and_data_parallel_denominators():
    loss_mat = torch.tensor(TOKEN_LOSS, dtype=D)
    assert aggregate_loss(loss_mat, MASK, "seq-mean-token-sum").item() == pytest.approx(8.12 / 3)
    got = aggregate_loss(loss_mat, MASK, "seq-mean-token-sum", scale=10.0, dp_size=2, global_batch_size=6)
    assert got.item() == pytest.approx(8.12 / 6 * 2 / 10)
    got = aggregate_loss(loss_mat, MASK, "token-mean", dp_size=2, batch_num_tokens=14)
    assert got.item() == pytest.approx(8.12 / 14 * 2)
    cfg = LossConfig(agg="token-mean", loss_scale_factor=4.0)
    assert policy_loss(LOGP, OLD, ADV, MASK, cfg)[0].item() == pytest.approx(8.12 / 7 / 4)


def test_gradient_is_the_policy_gradient_at_ratio_one():
    logp = torch.log(torch.tensor([[0.5, 0.25]], dtype=D)).requires_grad_()
    loss, _ = policy_loss(
        logp, logp.detach(), torch.tensor([2.0], dtype=D), torch.ones(1, 2), LossConfig(agg="token-sum")
    )
    loss.backward()
    assert logp.grad.tolist() == [[-2.0, -2.0]]  # d(-A r)/dlogp = -A at r = 1


def test_paper_defaults():
    cfg = LossConfig()
    assert (cfg.clip_low, cfg.clip_high, cfg.dual_clip, cfg.agg, cfg.scale) == (
        0.2,
        0.28,
        3.0,
        "seq-mean-token-sum",
        1000.0,
    )
    assert LossConfig(agg="token-mean").scale == 1.0


@pytest.mark.parametrize(
    ("field", "value"),
    [("clip_low", 1.0), ("clip_high", -0.1), ("dual_clip", 0.5), ("agg", "mean"), ("loss_scale_factor", 0.0)],
)
def test_config_errors_name_the_field(field, value):
    with pytest.raises(ConfigError, match=f"rl.loss.{field}"):
        LossConfig(**{field: value})


def test_fully_masked_batch_gives_zero_loss():
    loss, metrics = policy_loss(LOGP, OLD, ADV, torch.zeros(4, 3))
    assert loss.item() == 0.0 and not math.isnan(metrics["ratio_mean"])
