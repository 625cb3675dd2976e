import pytest

pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

import torch  # noqa: E402
from tokenizers import Tokenizer, models, pre_tokenizers  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast  # noqa: E402

from drkernel.agent.env import EnvConfig, KernelEnv  # noqa: E402
from drkernel.agent.hf_policy import HFPolicy  # noqa: E402
from drkernel.agent.loop import LoopConfig, run_episode  # noqa: E402
from drkernel.agent.policy import SamplingParams, token_counter  # noqa: E402
from drkernel.executors.fake import FakeExecutor  # noqa: E402
from drkernel.types import Problem  # noqa: E402

SPECIALS = ["<pad>", "<eos>", "<unk>"]
CHARS = [chr(c) for c in range(32, 127)] + ["\n", "\t"]


def tiny_policy(chat_template=True):
    vocab = {tok: i for i, tok in enumerate(SPECIALS + CHARS)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(pattern="", behavior="isolated")
    hf_tok = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>", pad_token="<pad>",
                                     unk_token="<unk>")
    if chat_template:
        hf_tok.chat_template = (
            "{% for m in messages %}[{{ m['role'] }}]{{ m['content'] }}\n{% endfor %}"
            "{% if add_generation_prompt %}[assistant]{% endif %}"
        )
    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=len(vocab), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=8192,
        pad_token_id=0, eos_token_id=1, bos_token_id=1,
    )
    return HFPolicy(LlamaForCausalLM(cfg), hf_tok, name="tiny")


MSGS = [{"role": "user", "content": "write a kernel"}]


def test_samples_with_token_logprobs():
    policy = tiny_policy()
    out = policy.generate(MSGS, n=3, sampling=SamplingParams(max_tokens=8, temperature=1.0))
    assert len(out) == 3
    for c in out:
        assert 1 <= c.completion_tokens <= 8
        assert len(c.logprobs) == len(c.token_ids) == len(c.tokens) == c.completion_tokens
        assert all(lp <= 0.0 for lp in c.logprobs)
        assert c.finish_reason in ("stop", "length") and c.prompt_tokens > 10


def test_logprobs_match_a_forward_pass():
    policy = tiny_policy()
    [c] = policy.generate(MSGS, n=1, sampling=SamplingParams(max_tokens=5, temperature=1.0, seed=3))
    prompt = policy.tokenizer(policy.render(MSGS), return_tensors="pt", add_special_tokens=False)["input_ids"]
    ids = torch.cat([prompt, torch.tensor([c.token_ids])], dim=1)
    with torch.no_grad():
        logits = policy.model(ids).logits[0, prompt.shape[1] - 1 : -1]
    expected = torch.log_softmax(logits.float(), -1).gather(-1, torch.tensor(c.token_ids)[:, None])[:, 0]
    assert c.logprobs == pytest.approx(expected.tolist(), abs=1e-4)


def test_greedy_is_deterministic_and_counts_tokens():
    policy = tiny_policy(chat_template=False)
    sp = SamplingParams(max_tokens=6, temperature=0.0)
    a = policy.generate(MSGS, sampling=sp)[0]
    b = policy.generate(MSGS, sampling=sp)[0]
    assert a.token_ids == b.token_ids
    assert policy.render(MSGS).endswith("<|assistant|>\n")
    assert token_counter(policy)("abc") == 3  # the tokenizer counts, not the char/4 estimate


def test_drives_an_episode():
    policy = tiny_policy()
    cfg = LoopConfig(env=EnvConfig(max_turns=2), sampling=SamplingParams(max_tokens=4))
    problem = Problem(name="p", reference_code="class Model: pass\n")
    traj = run_episode(KernelEnv(problem, FakeExecutor(), cfg.env), policy, cfg)
    assert traj.error is None and len(traj.turns) == 2
    assert traj.turns[0].result.error.kind == "no_code"  # random weights write no code
    assert traj.turns[0].logprobs and traj.turns[1].prompt_tokens > traj.turns[0].prompt_tokens
