"""One golden multi-turn batch through drkernel's own trainer step and through the verl path.

The verl path runs the drkernel_kernel agent loop (verl's AgentLoopBase and Continuous Token builder,
a scripted server manager, the fake judge), verl's own TransferQueue post-processing
(AgentLoopWorkerTQ._agent_loop_postprocess, with only the TransferQueue put captured) and the drkernel
trainer's step on the stored fields. The actor's log-prob pass (GPU) is replaced by the own trainer's
log-probs of the same turn-samples. Advantages, masks and the loss must agree.
"""

import asyncio
import math
import warnings

import pytest
import torch
from torch.testing import assert_close

pytest.importorskip("verl")
pytest.importorskip("transfer_queue")
pytest.importorskip("cachetools")

with warnings.catch_warnings():  # verl warns about optional engines it cannot import on this machine
    warnings.simplefilter("ignore")
    import transfer_queue as tq
    from omegaconf import OmegaConf
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap
    from verl.trainer.ppo import core_algos
    from verl.trainer.ppo.v1.agent_loop_tq import AgentLoopWorkerTQ
    from verl.workers.rollout.replica import TokenOutput

    import drkernel.rl.verl  # noqa: F401  (registers the agent loop and the trainer)
    from drkernel.rl.verl.agent_loop import KernelAgentLoop
    from drkernel.rl.verl.trainer import drkernel_step_from_fields

from drkernel.agent.policy import Completion
from drkernel.executors.fake import FakeExecutor
from drkernel.recipes import debug_cpu
from drkernel.rl.config import TinyModelConfig, apply_overrides
from drkernel.rl.losses import policy_loss
from drkernel.rl.step import prepare_step
from drkernel.rl.tiny import build_tiny, macro_text
from drkernel.rl.trainer import Trainer
from drkernel.types import Problem

CODE = {
    "good": "class ModelNew:\n    pass\n# fake: speedup=2.0\n# fake: coverage=0.9",
    "low": "class ModelNew:\n    pass\n# fake: speedup=2.0\n# fake: coverage=0.1",  # PRS drops it
    "bad": "class ModelNew:\n    pass\n# fake: incorrect",
}
FILLER = 3000  # words before the code: the next prompt no longer fits (an empty turn)

# (problem, sample) -> per turn: (variant, rollout log-probs far off (MRS), long answer) or "overlong"
SCRIPT = {
    ("A", 0): [("good", False, False), ("bad", False, False)],  # turn 1 is void (regression)
    ("A", 1): [("bad", False, False), ("good", False, False)],
    ("A", 2): [("good", True, False), ("good", True, False)],  # MRS rejects the trajectory
    ("B", 0): [("bad", False, False), ("bad", False, False)],  # group B ties: filtered
    ("B", 1): [("bad", False, False), ("bad", False, False)],
    ("B", 2): [("bad", False, False), ("bad", False, False)],
    ("C", 0): [("low", False, False), ("good", False, False)],  # PRS drops turn 0
    ("C", 1): [("bad", False, True), "overlong"],  # turn 1: empty, reward 0, still in the baseline
    ("C", 2): [("bad", False, False), ("good", False, False)],
}
N, TURNS = 3, 2


def _problem(name):
    return Problem(name=name, reference_code=f"# PROBLEM_{name}\nclass Model:\n    pass\n")


def _tiny():
    return build_tiny(TinyModelConfig(), {"x": dict(CODE)}, seed=0)


def _answer_ids(tok, variant, long):
    ids = [tok.convert_tokens_to_ids(macro_text(CODE[variant]))]
    if long:
        ids = [tok.convert_tokens_to_ids("here")] * FILLER + ids
    return ids + [tok.eos_token_id]


def _script_step(key, turn):
    step = SCRIPT[key][turn]
    return None if step == "overlong" else step


class OwnSampler:
    """The own trainer's sampler: the scripted answers; log-probs None (compared with themselves) or off."""

    def __init__(self, tok):
        self.tok = tok

    def count_tokens(self, text):
        return len(text.split())

    def sample(self, conversations, sampling):
        out = []
        for i, conv in enumerate(conversations):
            name = next(m["content"] for m in conv if "PROBLEM_" in m["content"]).split("PROBLEM_")[1][0]
            turn = sum(m["role"] == "assistant" for m in conv)
            step = _script_step((name, i % N), turn)
            if step is None:
                out.append(Completion(text="", finish_reason="prompt_overlong", token_ids=[], logprobs=[],
                                      extra={"prompt_ids": [3, 4, 5, 6]}))
                continue
            variant, off, long = step
            ids = _answer_ids(self.tok, variant, long)
            text = self.tok.decode(ids, skip_special_tokens=True)
            out.append(Completion(text=text, finish_reason="stop", token_ids=ids,
                                  logprobs=[-9.0] * len(ids) if off else None,
                                  extra={"prompt_ids": [3, 4, 5, 6]}))
        return out


class ScriptedServer:
    """verl's server manager for one trajectory: the same token ids and log-probs, turn by turn."""

    def __init__(self, tok, key):
        self.tok, self.key, self.calls, self.prompts = tok, key, 0, []

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        self.prompts.append(list(prompt_ids))
        turn = self.calls
        self.calls += 1
        while _script_step(self.key, turn) is None:
            turn += 1
        variant, off, long = _script_step(self.key, turn)
        ids = _answer_ids(self.tok, variant, long)
        return TokenOutput(token_ids=ids, log_probs=[-9.0] * len(ids) if off else None)


OVERRIDES = [
    f"rollout.n={N}", "trainer.prompts_per_step=3", "trainer.steps=1", "trainer.validate_every=0",
    f"rollout.max_turns={TURNS}", "judge.executor=fake", "rollout.cache_evaluations=false",
    "log.tensorboard=false", "log.save_rollouts=false", "rl.dynamic_sampling.min_group_size=2",
]


def _verl_config(prompt_length):
    return OmegaConf.create({
        "actor_rollout_ref": {"rollout": {"prompt_length": prompt_length, "response_length": 4096,
                                          "calculate_log_probs": True}},
        "data": {},
        "drkernel": {"recipe": "debug_cpu", "overrides": OVERRIDES},
    })


def _agent_loop(cfg, tok, server):
    return KernelAgentLoop(trainer_config=DictConfigWrap(cfg), server_manager=server, tokenizer=tok,
                           processor=None, dataset_cls=None, data_config=DictConfigWrap(cfg.data))


class _Captured:
    def __init__(self):
        self.keys, self.fields = [], []

    async def put(self, keys, fields, tags, partition_id):
        self.keys.extend(keys)
        self.fields.append(fields)


def _postprocess_worker():
    """AgentLoopWorkerTQ's own class, bare: no Ray actor, no reward workers, no teacher, no processor."""
    cls = AgentLoopWorkerTQ.__ray_metadata__.modified_class
    worker = cls.__new__(cls)
    worker.reward_loop_worker_handles = None
    worker.distillation_enabled = False
    worker.processor = None
    return worker


def _verl_rows(order, tok, monkeypatch):
    """Run every trajectory through the agent loop and verl's post-processing; the stored rows."""
    cap = _Captured()
    monkeypatch.setattr(tq, "async_kv_batch_put", cap.put)
    probe = _agent_loop(_verl_config(10**6), tok, None)
    first = probe.continuous_token_builder.build_initial_tokens(
        [{"role": "user", "content": "x"}]
    )  # the builder works with the tiny chat template
    assert first
    cfg = None
    outputs_per_traj = []
    for name, s in order:
        problem = _problem(name)
        row = {"extra_info": {"problem": {"name": name, "reference_code": problem.reference_code}},
               "uid": f"u{name}", "session_id": s, "raw_prompt": [], "global_steps": 1}
        if cfg is None:  # prompt_length: the first prompt plus room for feedback, not for FILLER words
            from drkernel.agent.env import KernelEnv

            env = KernelEnv(problem, FakeExecutor())
            env.reset()
            cfg = _verl_config(
                len(probe.continuous_token_builder.build_initial_tokens(env.observation)) + 1000
            )
        server = ScriptedServer(tok, (name, s))
        loop = _agent_loop(cfg, tok, server)
        outs = asyncio.run(loop.run({"temperature": 1.0}, **row))
        assert server.calls == sum(_script_step((name, s), k) is not None for k in range(TURNS))
        if len(server.prompts) == 2:  # turn 1's prompt extends turn 0's prompt and sampled tokens
            sampled = outs[0].response_ids
            assert server.prompts[1][: len(server.prompts[0]) + len(sampled)] == server.prompts[0] + sampled
        outputs_per_traj.append(outs)
        asyncio.run(_postprocess_worker()._agent_loop_postprocess(outs, False, **row))
    return cap, outputs_per_traj


def test_golden_batch_agrees_in_both_engines(tmp_path, monkeypatch):
    model, tok = _tiny()
    cfg = apply_overrides(debug_cpu(), OVERRIDES)
    # -- the own trainer ---------------------------------------------------------------------------
    with Trainer(cfg, tmp_path, model=model, tokenizer=tok, problems=[_problem(n) for n in "ABC"],
                 validation=[], executor=FakeExecutor(), sampler=OwnSampler(tok)) as tr:
        batch, _ = tr._rollouts()
        groups_ok = tr._pick_groups(batch)
        own = prepare_step(batch, groups_ok, tr.model, tr.tokenizer, tr.config, step=1)
    order = [(batch.problems[g].name, i % N) for i, g in enumerate(batch.group_ids)]
    row_of = {key: i for i, key in enumerate(order)}
    assert own.rewards.present[row_of["C", 1], 1] and not own.rows.responses[row_of["C", 1] * TURNS + 1]

    # -- the verl path -----------------------------------------------------------------------------
    cap, outs = _verl_rows(order, tok, monkeypatch)
    assert [len(o) for o in outs] == [TURNS] * len(order)
    extra, masks, rollout, scores = [], [], [], []
    for td in cap.fields:
        extra.extend(list(td["extra_fields"]))
        for i in range(len(td)):
            masks.append(td["response_mask"][i])
            rollout.append(td["rollout_log_probs"][i])
            scores.append(float(td["rm_scores"][i].sum()))
    keys = cap.keys
    # verl's post-processing copied each trajectory's last reward onto its earlier turn...
    ca = row_of["A", 0] * TURNS
    assert scores[ca] == scores[ca + 1] == 0.0 and extra[ca]["drkernel_reward"] == pytest.approx(3.9)
    # ...and the drkernel fields keep the per-turn truth and the (prompt, trajectory, turn) key
    assert keys[ca] == "uA_0_0" and extra[ca]["drkernel_turn"] == 0 and extra[ca + 1]["drkernel_turn"] == 1
    assert extra[row_of["C", 1] * TURNS + 1]["drkernel_empty"]

    width = max(int(m.numel()) for m in masks)

    def pad(rows, fill=0.0):
        out = torch.full((len(rows), width), fill)
        for i, r in enumerate(rows):
            out[i, : r.numel()] = r.float()
        return out

    response_mask = pad(masks).bool()
    # the actor's log-prob pass (GPU) -> the own trainer's log-probs of the same turn-sample
    old = torch.zeros(len(extra), width)
    for i, ef in enumerate(extra):
        own_row = row_of[ef["drkernel_prompt"][1:], ef["drkernel_trajectory"]] * TURNS + ef["drkernel_turn"]
        k = int(response_mask[i].sum())
        old[i, :k] = own.old_logp[own_row, :k]
    step, real = drkernel_step_from_fields(extra, response_mask, old, pad(rollout), cfg, step=1)
    assert bool(real.all())

    # -- the same numbers ---------------------------------------------------------------------------
    for i, ef in enumerate(extra):
        b, t = row_of[ef["drkernel_prompt"][1:], ef["drkernel_trajectory"]], ef["drkernel_turn"]
        own_row = b * TURNS + t
        assert_close(step.advantages[i], own.advantages[b, t].to(step.advantages.dtype), rtol=0, atol=1e-6)
        assert bool(step.valid[i]) == bool(own.valid[b, t])
        assert bool(step.mrs_kept[i]) == bool(own.mrs_kept[b, t])
        assert bool(step.prs_kept[i]) == bool(own.prs_kept[b, t])
        assert bool(step.groups_ok[i]) == bool(own.groups_ok[b])
        k = int(response_mask[i].sum())
        assert step.loss_mask[i, :k].tolist() == own.loss_mask[own_row, :k].tolist()
        assert not step.loss_mask[i, k:].any()
    # the batch has what it should: a void turn, an MRS-rejected trajectory, a PRS drop, a filtered group
    assert not own.valid[row_of["A", 0], 1]
    assert not own.mrs_kept[row_of["A", 2]].any()
    assert not own.prs_kept[row_of["C", 0], 0] and own.prs_kept[row_of["C", 0], 1]
    assert not own.groups_ok[row_of["B", 0]]
    # the empty turn counts in the turn-1 baseline: C's turn-1 returns (3.9, 0, 3.9)
    c1 = own.advantages[[row_of["C", s] for s in range(N)], 1]
    assert_close(c1, torch.tensor([3.9 - 1.95, 0 - 3.9, 3.9 - 1.95]), rtol=0, atol=1e-5)
    assert step.trained_rows == int(own.loss_mask.any(-1).sum())

    # -- the loss: own aggregation vs verl's dispatch of the "drkernel" loss with the trainer's divisor --
    gen = torch.Generator().manual_seed(0)
    own_new = own.old_logp + 0.3 * torch.randn(own.old_logp.shape, generator=gen)
    own_loss, _ = policy_loss(own_new, own.old_logp, own.advantages.reshape(-1), own.loss_mask, cfg.rl.loss)
    new = torch.zeros_like(old)
    for i, ef in enumerate(extra):
        own_row = row_of[ef["drkernel_prompt"][1:], ef["drkernel_trajectory"]] * TURNS + ef["drkernel_turn"]
        k = int(response_mask[i].sum())
        new[i, :k] = own_new[own_row, :k]
    actor = _actor_config(cfg, step.trained_rows, int(step.loss_mask.sum()))
    fn = core_algos.get_policy_loss_fn("drkernel")
    verl_loss, _ = fn(old_log_prob=old, log_prob=new,
                      advantages=step.advantages.view(-1, 1).float() * step.loss_mask,
                      response_mask=step.loss_mask, loss_agg_mode=actor.loss_agg_mode, config=actor)
    assert own_loss.item() != 0.0 and math.isfinite(own_loss.item())
    assert_close(verl_loss.double(), own_loss.double(), rtol=1e-5, atol=1e-7)


def _actor_config(cfg, rows, tokens):
    from verl.workers.config import ActorConfig

    loss = cfg.rl.loss
    actor = ActorConfig(
        strategy="fsdp", ppo_mini_batch_size=1, ppo_micro_batch_size_per_gpu=1, rollout_n=1,
        clip_ratio_low=loss.clip_low, clip_ratio_high=loss.clip_high, clip_ratio_c=loss.dual_clip,
        loss_agg_mode="seq-mean-token-sum-norm", loss_scale_factor=loss.scale,
        policy_loss={"loss_mode": "drkernel"},
    )
    # what verl's ppo_loss sets from the batch the drkernel trainer sent
    actor.global_batch_info.update(dp_size=1, batch_num_tokens=tokens, global_batch_size=rows,
                                   loss_scale_factor=loss.scale)
    return actor
