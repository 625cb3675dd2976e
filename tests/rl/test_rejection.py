"""Golden tables for MRS (every level, both veto scopes) and PRS (soft, hard, seeded)."""

import math

import pytest
import torch
from torch.testing import assert_close

from drkernel.errors import ConfigError
from drkernel.rl import (
    MismatchConfig,
    ProfilingRejectionConfig,
    mismatch_ratio,
    mismatch_rejection_mask,
    prs_keep_mask,
    prs_keep_prob,
)

D = torch.float64
# 4 turn-rows of 2 trajectories x 2 turns, 2 tokens each; log(pi_train / pi_rollout) per token.
LOG_RATIO = torch.tensor([[0.0004, 0.0004], [0.0, 0.0012], [-0.003, 0.0], [0.0009, -20.0]], dtype=D)
MASK = torch.tensor([[True, True], [True, True], [True, True], [True, False]])  # last token is padding
TRAJ = torch.tensor([0, 0, 1, 1])
TURN = torch.tensor([0, 1, 0, 1])


def mrs(level, log_ratio=LOG_RATIO, **kw):
    return mismatch_rejection_mask(
        log_ratio, torch.zeros_like(log_ratio), MASK, TRAJ, TURN, level=level, **kw
    ).tolist()


def test_geometric_trajectory_level_is_the_default():  # docs/paper_spec.md §6, paper Eq. 6
    # trajectory 0: mean(.0004,.0004,0,.0012) = .0005 -> 1.0005 kept
    # trajectory 1: mean(-.003, 0, .0009) = -.0007 -> 0.9993 kept (padding token ignored)
    assert mrs("geometric") == [[True, True], [True, True], [True, True], [True, False]]
    ratio = mismatch_ratio(LOG_RATIO, torch.zeros_like(LOG_RATIO), MASK, TRAJ, TURN)
    assert_close(ratio[:, 0], torch.tensor([math.exp(0.0005)] * 2 + [math.exp(-0.0007)] * 2, dtype=D))


def test_turn_geometric_level():  # row means .0004, .0006, -.0015, .0009
    assert mrs("turn_geo") == [[True, True], [True, True], [False, False], [True, False]]


def test_turn_product_level():  # row sums .0008, .0012, -.003, .0009
    assert mrs("turn") == [[True, True], [False, False], [False, False], [True, False]]


def test_sequence_product_level():  # trajectory sums .002 and -.0021
    assert mrs("sequence") == [[False, False], [False, False], [False, False], [False, False]]


def test_token_level():
    assert mrs("token") == [[True, True], [True, False], [False, True], [True, False]]


def test_veto_rejects_the_whole_trajectory_in_the_paper():  # docs/paper_spec.md §6 / §15
    lr = LOG_RATIO.clone()
    lr[1, 0] = math.log(1e-5)
    assert mrs("token", lr) == [[False, False], [False, False], [False, True], [True, False]]


def test_veto_rejects_only_the_turn_row_in_the_code():
    lr = LOG_RATIO.clone()
    lr[1, 0] = math.log(1e-5)
    assert mrs("token", lr, veto_scope="turn") == [[True, True], [False, False], [False, True], [True, False]]


def test_veto_ignores_padding_and_can_be_disabled():
    # the padding token at log ratio -20 (< log 1e-4) vetoes nothing
    assert mrs("token", veto=1e-4) == mrs("token", veto=None)


def test_mismatch_config_defaults_and_errors():
    cfg = MismatchConfig()
    assert (cfg.level, cfg.bounds, cfg.veto, cfg.veto_scope) == (
        "geometric",
        (0.999, 1.001),
        1e-4,
        "trajectory",
    )
    for kw, field in [
        ({"bounds": (1.001, 0.999)}, "bounds"),
        ({"level": "x"}, "level"),
        ({"veto": 2.0}, "veto"),
    ]:
        with pytest.raises(ConfigError, match=f"rl.mrs.{field}"):
            MismatchConfig(**kw)


PR = torch.tensor([0.0, 0.3, 0.325, 0.35, 0.4, 1.0], dtype=D)


def test_prs_keep_probability_golden():  # docs/paper_spec.md §7, paper Eq. 9
    assert_close(
        prs_keep_prob(PR), torch.tensor([0.0, 0.0, 0.25, 0.5, 1.0, 1.0], dtype=D), rtol=0, atol=1e-12
    )


def test_prs_hard_threshold_variant():  # docs/paper_spec.md §7: "w/o s", keep iff PR >= tau
    assert prs_keep_prob(PR, slope=0.0).tolist() == [0.0, 1.0, 1.0, 1.0, 1.0, 1.0]


def test_prs_never_drops_incorrect_samples():
    correct = torch.zeros(6, dtype=torch.bool)
    assert prs_keep_mask(PR, correct, seed=1).all()


def test_prs_is_seeded_and_reproducible():
    pr = torch.full((1000,), 0.35, dtype=D)
    correct = torch.ones(1000, dtype=torch.bool)
    a = prs_keep_mask(pr, correct, seed=7)
    b = prs_keep_mask(pr, correct, generator=torch.Generator().manual_seed(7))
    assert torch.equal(a, b)
    assert not torch.equal(a, prs_keep_mask(pr, correct, seed=8))


def test_prs_keep_rate_matches_the_probability():
    n = 20000
    correct = torch.ones(n, dtype=torch.bool)
    for value, p in [(0.325, 0.25), (0.35, 0.5), (0.375, 0.75)]:
        rate = prs_keep_mask(torch.full((n,), value, dtype=D), correct, seed=3).double().mean().item()
        assert abs(rate - p) < 4.5 * math.sqrt(p * (1 - p) / n)


def test_prs_deterministic_ends_and_options():
    correct = torch.ones(6, dtype=torch.bool)
    keep = prs_keep_mask(PR, correct, seed=0)
    assert keep[[0, 1]].tolist() == [False, False] and keep[[4, 5]].tolist() == [True, True]
    nan = torch.tensor([float("nan")], dtype=D)
    one = torch.ones(1, dtype=torch.bool)
    assert prs_keep_mask(nan, one, seed=0).tolist() == [True]
    assert prs_keep_mask(nan, one, missing="drop", seed=0).tolist() == [False]
    fast = prs_keep_mask(torch.zeros(1), one, speedup=torch.tensor([2.0]), speedup_threshold=1.5, seed=0)
    assert fast.tolist() == [True]


def test_prs_config_defaults_and_errors():
    cfg = ProfilingRejectionConfig()
    assert (cfg.tau, cfg.slope) == (0.3, 0.1)
    with pytest.raises(ConfigError, match="rl.prs.slope"):
        ProfilingRejectionConfig(slope=-1.0)
    with pytest.raises(ConfigError, match="rl.prs.tau"):
        ProfilingRejectionConfig(tau=2.0)
