"""The update step of docs/rl.md, end to end on FakeExecutor-shaped results: it runs and learns."""

import torch

from drkernel.rl import (
    LossConfig,
    compute_advantages,
    dynamic_sampling_filter,
    last_present_values,
    mismatch_rejection_mask,
    policy_loss,
    prs_keep_mask,
    reward_to_go,
    turn_rewards,
    void_turn_mask,
)
from drkernel.types import EvalOutcome, EvalResult

OK = EvalResult(outcome=EvalOutcome.OK, compiled=True, correct=True, speedup=1.5, coverage=0.9)
LOW_PR = EvalResult(outcome=EvalOutcome.OK, compiled=True, correct=True, speedup=1.5, coverage=0.1)
BAD = EvalResult(outcome=EvalOutcome.INCORRECT, compiled=True)


def test_documented_update_step_runs_and_pushes_up_the_good_turn():
    # prompt 0: 2 trajectories x 2 turns; prompt 1: all fail (tied, filtered out)
    results = [[BAD, OK], [BAD, LOW_PR], [BAD, BAD], [BAD, BAD]]
    prompt_ids = torch.tensor([0, 0, 1, 1])
    b, t, length = 4, 2, 3
    tr = turn_rewards(results, "paper")
    valid = void_turn_mask(tr.rewards, tr.present)
    returns = reward_to_go(tr.rewards, valid, gamma=1.0)
    logits = torch.zeros(b * t, length, requires_grad=True)
    logp = torch.nn.functional.logsigmoid(logits)
    old_logp = logp.detach()
    tok_mask = torch.ones(b * t, length, dtype=torch.bool)
    traj_ids = torch.arange(b).repeat_interleave(t)
    turn_ids = torch.arange(t).repeat(b)
    keep_tok = mismatch_rejection_mask(old_logp, old_logp, tok_mask, traj_ids, turn_ids)
    kept = keep_tok.any(-1).view(b, t) | ~tok_mask.any(-1).view(b, t)
    kept &= prs_keep_mask(tr.coverage, tr.correct, seed=0)
    groups_ok = dynamic_sampling_filter(last_present_values(tr.rewards, tr.present), prompt_ids)
    adv = compute_advantages(returns, prompt_ids, valid & groups_ok[:, None], kept)
    mask = tok_mask & (valid & kept & groups_ok[:, None]).view(-1, 1)
    loss, _ = policy_loss(logp, old_logp, adv.view(-1), mask, LossConfig())
    loss.backward()
    assert groups_ok.tolist() == [True, True, False, False]
    assert kept.tolist() == [[True, True], [True, False], [True, True], [True, True]]  # PR 0.1 dropped
    # turn 1 of trajectory 0 (correct, PR 0.9) is a singleton after PRS: A = G = 1 + 1.5 + 0.9
    assert abs(adv[0, 1].item() - 3.4) < 1e-6
    assert (logits.grad[1] < 0).all()  # descending the loss raises its log-probs
    assert (logits.grad[4:] == 0).all()  # the filtered prompt gets no gradient


def test_the_micro_batch_split_leaves_the_gradient_as_it_is():
    """trainer.micro_batch_tokens may change on resume (rl/cli.py RESUMABLE) because the micro-batches'
    losses add up to the batch's: one micro-batch per row gives the gradient of one for all rows."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from drkernel.rl.update import TokenRows, backward_rows, score_rows

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32,
                                         num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2))
    rows = TokenRows(prompts=[[1, 2, 3], [4, 5], [6, 7, 8, 9, 10], [11]],
                     responses=[[12, 13], [14, 15, 16, 17], [18], [19, 20, 21]], pad_id=0)
    mask = rows.response_mask()
    advantages = torch.tensor([1.0, -0.5, 2.0, -1.5])
    cfg = LossConfig()
    grads = []
    for budget in (1000, 1):  # all rows in one micro-batch; each row alone
        old_logp, _ = score_rows(model, rows, range(4), token_budget=budget)
        model.zero_grad()
        backward_rows(model, rows, old_logp, advantages, mask, cfg, token_budget=budget)
        grads.append([p.grad.clone() for p in model.parameters()])
    assert any(bool(g.abs().sum() > 0) for g in grads[0])
    for whole, split in zip(*grads, strict=True):
        torch.testing.assert_close(whole, split, rtol=1e-4, atol=1e-7)
