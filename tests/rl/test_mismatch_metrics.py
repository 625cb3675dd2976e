import math

import pytest
import torch

from drkernel.rl import mismatch_metrics


def test_mismatch_metrics_golden():
    trainer = torch.log(torch.tensor([[0.5, 0.25, 0.9]], dtype=torch.float64))
    rollout = torch.log(torch.tensor([[0.25, 0.25, 0.1]], dtype=torch.float64))
    mask = torch.tensor([[True, True, False]])
    m = mismatch_metrics(trainer, rollout, mask)  # rho = (2, 1) on the two valid tokens
    assert m["kl_k1"] == pytest.approx(-math.log(2) / 2, abs=1e-12)
    assert m["kl_k3"] == pytest.approx((1 - math.log(2)) / 2, abs=1e-12)
    assert m["chi2"] == pytest.approx(1.5, abs=1e-12)
    assert m["ppl_trainer"] == pytest.approx(math.sqrt(8), abs=1e-12)
    assert m["ppl_rollout"] == pytest.approx(4.0, abs=1e-12)
    assert m["log_ratio_abs_max"] == pytest.approx(math.log(2), abs=1e-12)


def test_identical_policies_have_no_mismatch():
    lp = torch.log(torch.tensor([[0.3, 0.7]]))
    m = mismatch_metrics(lp, lp, torch.ones(1, 2))
    assert m["kl_k1"] == 0.0 and m["kl_k3"] == 0.0 and m["chi2"] == pytest.approx(0.0, abs=1e-12)


def test_an_empty_batch_measures_nothing():
    # a step with no token to train on (every group filtered) logged a mismatch of 0 and perplexities of
    # 0, which no batch can have, as measured values in metrics.jsonl and TensorBoard
    lp = torch.log(torch.tensor([[0.3, 0.7]]))
    m = mismatch_metrics(lp, lp, torch.zeros(1, 2))
    assert set(m) == {"kl_k1", "kl_k3", "ppl_rollout", "ppl_trainer", "chi2", "log_ratio_abs_max"}
    assert all(math.isnan(v) for v in m.values())
