"""One training batch of the drkernel agent loop through verl's own v1 batch code, on the CPU (issue 34).

The agent loop runs episodes against a scripted server that answers as verl's LLMServerClient does
(token ids, log-probs, the weight version in extra_fields), verl's AgentLoopWorkerTQ post-processing
stores the rows, verl's padding appends its synthetic rows, the drkernel trainer computes the
advantages, and verl's PPOTrainer._compute_metrics reads the batch back. Only TransferQueue is an
in-memory store here (assembling rows as TransferQueue's storage does) and the actor's log-prob pass
is zeros.

- blocker 3: every row carries min/max_global_steps, and verl's metrics step does not raise on them;
- blocker 4: verl's padding copies the first row with its drkernel_* fields; the trainer leaves padded
  rows out of the step (no duplicate (prompt, trajectory, turn)) and gives them no loss token.
"""

from __future__ import annotations

import asyncio
import warnings

import pytest
import torch

pytest.importorskip("verl")
pytest.importorskip("transfer_queue")

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    import transfer_queue as tq
    from omegaconf import OmegaConf
    from tensordict import NonTensorStack, TensorDict
    from transfer_queue import KVBatchMeta
    from verl.trainer.ppo.padding_utils import upsample_batch_to_divisible_size
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer
    from verl.workers.rollout.replica import TokenOutput

    from drkernel.rl.verl.trainer import DrKernelTrainer

from tests.rl.test_verl_golden import (
    OVERRIDES,
    _agent_loop,
    _answer_ids,
    _postprocess_worker,
    _problem,
    _tiny,
)

WEIGHTS = 6  # the weight version the server reports (verl's sync trainer: the step's number minus one)
STEP = WEIGHTS + 1
# (sample) -> per turn: the answer, or None for a prompt-overlong turn (no generation)
EPISODES = {0: ["good", "bad"], 1: ["bad", "good"], 2: ["bad", "bad"]}


class Server:
    """Answers as verl's LLMServerClient.generate does: token ids, log-probs, extra_fields."""

    def __init__(self, tok, script):
        self.tok, self.script, self.calls = tok, script, 0

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        variant = self.script[self.calls]
        self.calls += 1
        ids = _answer_ids(self.tok, variant, False)
        return TokenOutput(token_ids=ids, log_probs=[-0.5] * len(ids), stop_reason="completed",
                           extra_fields={"global_steps": WEIGHTS, "min_global_steps": WEIGHTS,
                                         "max_global_steps": WEIGHTS, "num_cached_tokens": 0})


class MemoryTQ:
    """TransferQueue's kv_batch_get/put in memory; rows come back assembled as its storage does."""

    def __init__(self):
        self.rows: dict[str, dict] = {}
        self.tags: dict[str, dict] = {}

    def put(self, keys, partition_id, fields=None, tags=None):
        for i, key in enumerate(keys):
            row = self.rows.setdefault(key, {})
            for name in fields.keys():
                value = fields.get(name)
                if isinstance(value, NonTensorStack):
                    row[name] = value.tolist()[i]
                elif value.is_nested:
                    row[name] = value.unbind()[i]
                else:
                    row[name] = value[i]
            if tags is not None:
                self.tags[key] = tags[i]
        tags = [self.tags.get(k, {}) for k in keys]
        return KVBatchMeta(keys=list(keys), tags=tags, partition_id=partition_id)

    async def aput(self, keys, fields, tags, partition_id):
        self.put(keys, partition_id, fields, tags)

    def get(self, keys, partition_id, select_fields=None):
        rows = [self.rows[k] for k in keys]
        names = sorted(select_fields or rows[0].keys())
        out = {}
        for name in names:
            if name not in rows[0]:  # a field nothing wrote (values without a critic): left out
                continue
            values = [r[name] for r in rows]
            if not all(isinstance(v, torch.Tensor) for v in values):
                out[name] = NonTensorStack(*values)
            elif all(v.dim() == 0 for v in values):
                out[name] = torch.stack(values)
            else:
                out[name] = torch.nested.as_nested_tensor(values, layout=torch.jagged)
        return TensorDict(out, batch_size=len(rows))


@pytest.fixture
def store(monkeypatch):
    mem = MemoryTQ()
    monkeypatch.setattr(tq, "kv_batch_put", mem.put)
    monkeypatch.setattr(tq, "async_kv_batch_put", mem.aput)
    monkeypatch.setattr(tq, "kv_batch_get", mem.get)
    return mem


def _config():
    return OmegaConf.create({
        "actor_rollout_ref": {"rollout": {"prompt_length": 10**6, "response_length": 4096,
                                          "calculate_log_probs": True,
                                          "moe_load_balance_metrics_interval": 0},
                              "model": {}},
        "data": {},
        "drkernel": {"recipe": "debug_cpu",
                     "overrides": [*OVERRIDES, "rl.mrs.enabled=false", "rl.prs.enabled=false"]},
    })


def _rollout(store, tok) -> KVBatchMeta:
    """The episodes through the agent loop and verl's post-processing into the store."""
    cfg = _config()
    for s, script in EPISODES.items():
        problem = _problem("A")
        row = {"extra_info": {"problem": {"name": "A", "reference_code": problem.reference_code}},
               "uid": "uA", "session_id": s, "raw_prompt": [], "global_steps": STEP}
        outs = asyncio.run(_agent_loop(cfg, tok, Server(tok, script)).run({"temperature": 1.0}, **row))
        assert len(outs) == len(script)
        asyncio.run(_postprocess_worker()._agent_loop_postprocess(outs, False, **row))
    keys = list(store.rows)
    return KVBatchMeta(keys=keys, tags=[store.tags[k] for k in keys], partition_id="train")


def _trainer() -> DrKernelTrainer:
    """The drkernel trainer without its workers: what _compute_advantage and _compute_metrics read."""
    trainer = DrKernelTrainer.__new__(DrKernelTrainer)
    trainer.config = _config()
    from drkernel.rl.verl.settings import run_config

    trainer.drkernel_config = run_config(trainer.config)
    trainer.global_steps = STEP
    trainer._trained_rows = 0
    trainer.use_critic = False
    trainer._rollout_moe_lb_metrics_accumulator = None
    trainer._get_n_gpus_for_throughput = lambda: 8
    return trainer


def _actor_log_probs(store, batch):
    """The actor's log-prob pass (a GPU worker in a run): zeros of each row's response length."""
    data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=["responses"])
    old = [torch.zeros(r.numel()) for r in data["responses"].unbind()]
    nested = torch.nested.as_nested_tensor(old, layout=torch.jagged)
    tq.kv_batch_put(keys=batch.keys, partition_id=batch.partition_id,
                    fields=TensorDict({"old_log_probs": nested}, batch_size=len(old)))


def _metrics(trainer, batch, metrics):
    """verl's own end-of-step metrics (PPOTrainer._compute_metrics), which read every row's tags."""
    timing = {"step": 1.0, "gen": 0.5}
    PPOTrainer._compute_metrics(trainer, batch, metrics, timing, global_steps=STEP, epoch=0)


def test_rows_carry_the_weight_versions_and_verls_metrics_read_them(store):
    model, tok = _tiny()
    batch = _rollout(store, tok)
    assert len(batch) == 6
    trainer = _trainer()
    _actor_log_probs(store, batch)
    metrics: dict = {}
    batch = trainer._compute_advantage(batch, metrics)
    _metrics(trainer, batch, metrics)
    for key in batch.keys:
        ef = store.rows[key]["extra_fields"]
        assert ef["min_global_steps"] == ef["max_global_steps"] == WEIGHTS
        assert store.tags[key]["min_global_steps"] == WEIGHTS  # what verl's post-processing tags
    assert metrics["training/off_policy/trajectory_staleness/max"] == 0  # sampled with the step's weights
    assert metrics["training/off_policy/trajectory_spans/max"] == 1
    assert metrics["drkernel/rows"] == 6 and metrics["training/num_turns/max"] == 4


def test_an_overlong_first_turn_still_has_weight_versions(store):
    model, tok = _tiny()
    cfg = _config()
    cfg.actor_rollout_ref.rollout.prompt_length = 3  # every prompt is overlong: no generation at all
    problem = _problem("A")
    row = {"extra_info": {"problem": {"name": "A", "reference_code": problem.reference_code}},
           "uid": "uA", "session_id": 0, "raw_prompt": [], "global_steps": STEP}
    server = Server(tok, [])
    outs = asyncio.run(_agent_loop(cfg, tok, server).run({"temperature": 1.0}, **row))
    assert server.calls == 0 and outs
    for out in outs:
        assert out.extra_fields["min_global_steps"] == out.extra_fields["max_global_steps"] == WEIGHTS


@pytest.mark.parametrize("dp", [4, 8])
def test_verls_padding_rows_take_no_part_in_the_step(store, dp):
    model, tok = _tiny()
    batch = _rollout(store, tok)
    padded = upsample_batch_to_divisible_size(batch, dp, tok.eos_token_id)  # verl's own padding
    pads = [k for k, t in zip(padded.keys, padded.tags, strict=True) if t.get("is_padding")]
    assert len(padded) % dp == 0 and len(pads) == len(padded) - len(batch) > 0
    first = store.rows[batch.keys[0]]["extra_fields"]
    for key in pads:  # the copies do carry the first row's (prompt, trajectory, turn)
        ef = store.rows[key]["extra_fields"]
        assert (ef["drkernel_prompt"], ef["drkernel_trajectory"], ef["drkernel_turn"]) == (
            first["drkernel_prompt"], first["drkernel_trajectory"], first["drkernel_turn"])
    trainer = _trainer()
    _actor_log_probs(store, padded)

    metrics_plain: dict = {}
    trainer._compute_advantage(batch, metrics_plain)
    plain = {k: store.rows[k]["advantages"].clone() for k in batch.keys}
    metrics: dict = {}
    out = trainer._compute_advantage(padded, metrics)
    assert out.keys == padded.keys
    assert metrics["drkernel/rows"] == len(batch)
    assert metrics["drkernel/trained_rows"] == metrics_plain["drkernel/trained_rows"] > 0
    for key in batch.keys:  # the real rows' advantages are those of the unpadded batch
        torch.testing.assert_close(store.rows[key]["advantages"], plain[key])
    for key in pads:  # padded rows: no loss token, no advantage
        assert not store.rows[key]["response_mask"].any() and not store.rows[key]["loss_mask"].any()
        assert not store.rows[key]["advantages"].any()
    _metrics(trainer, out, metrics)


def test_judge_task_ids_do_not_repeat_across_steps(store, monkeypatch):
    """Each step's prompt uid is in the judge's task ids: `drkernel serve` refuses (HTTP 409) an id
    that names another kernel, which tests/rl/test_verl_cpu_run.py met in its second step."""
    import drkernel.rl.verl.agent_loop as agent_loop_module
    from drkernel.executors.fake import FakeExecutor

    judge = FakeExecutor()
    monkeypatch.setattr(agent_loop_module, "shared_executor", lambda cfg: judge)
    model, tok = _tiny()
    problem = _problem("A")
    for uid in ("step1-uid", "step2-uid"):
        row = {"extra_info": {"problem": {"name": "A", "reference_code": problem.reference_code}},
               "uid": uid, "session_id": 0, "raw_prompt": [], "global_steps": STEP}
        loop = _agent_loop(_config(), tok, Server(tok, ["good", "bad"]))
        asyncio.run(loop.run({"temperature": 1.0}, **row))
    assert [c.task_id for c in judge.calls] == [
        "A#step1-uid.0/t0", "A#step1-uid.0/t1", "A#step2-uid.0/t0", "A#step2-uid.0/t1"]
