"""rollout.generation_batch only groups the model backend's generation requests: a resume may change it
(rl/cli.py RESUMABLE), as it may trainer.micro_batch_tokens."""

from __future__ import annotations

import torch

from drkernel.agent.policy import SamplingParams
from drkernel.problems.suite import builtin_problem
from drkernel.recipes import debug_cpu
from drkernel.rl.build import build_model
from drkernel.rl.rollout import ModelSampler


def test_the_generation_batch_leaves_each_completion_as_it_is():
    """Prompts of three lengths, generated together (left-padded to the longest) or one by one: the same
    tokens and, up to rounding, the same log-probs (what MRS compares with the trainer's), in order."""
    torch.manual_seed(0)
    model, tokenizer = build_model(debug_cpu().model, [builtin_problem("101_ReLU", "cpu")])
    conversations = [[{"role": "user", "content": "write a relu kernel " * k}] for k in (1, 5, 3)]
    greedy = SamplingParams(temperature=0.0, max_tokens=6)
    together, alone = (ModelSampler(model, tokenizer, max_prompt_tokens=4096, batch_size=b)
                       .sample(conversations, greedy) for b in (3, 1))
    assert len({len(c.extra["prompt_ids"]) for c in together}) == 3  # the batch was padded
    for a, b in zip(together, alone, strict=True):
        assert a.extra["prompt_ids"] == b.extra["prompt_ids"] and a.token_ids == b.token_ids
        assert a.token_ids and a.logprobs is not None and b.logprobs is not None
        torch.testing.assert_close(torch.tensor(a.logprobs), torch.tensor(b.logprobs), rtol=0, atol=1e-5)
