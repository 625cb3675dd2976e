"""Two real verl v1 training steps on the CPU, checked against drkernel's own trainer (issue 34, item 1).

verl 0.9.1's main_ppo cannot run on a machine without a GPU (docs/training.md, "A verl run on the CPU",
says where it stops). This test runs everything of main_ppo's TaskRunnerV1 that does not need a GPU, as
it runs there:

- Ray on 127.0.0.1 and the real TransferQueue (tq.init: a controller and a storage unit, ZMQ);
- the recipe's overrides (recipes/verl/run_8b.sh, DRY_RUN=1), scaled down, through verl's Hydra
  composition and validate_config;
- DrKernelTrainer built by verl's trainer registry, its real tokenizer, dataloader (over a parquet that
  `drkernel train parquet` wrote), replay buffer and `fit()` loop: sampling, `_balance_batch` (verl's
  data-parallel padding), `_compute_old_log_prob`, `_compute_advantage`, `_update_actor`,
  `_compute_metrics`, TransferQueue clean-up, for two steps;
- verl's AgentLoopWorkerTQ (its own class and __init__, in this process instead of a Ray actor)
  running the drkernel_kernel agent loop, which judges through a real `drkernel serve` (the sandbox
  judge, Triton interpreter) on 127.0.0.1.

Replaced, because they need a GPU: the rollout server (here a tiny random-weights model built by the
test, sampling with transformers' `generate`, answering as verl's LLMServerClient does), the actor
worker group (here one process computing the log-probs with verl's logprobs_from_logits and the loss
with verl's own ppo_loss, then an AdamW step; it reports a data-parallel size of 7 so that verl pads
the batch), and the weight sync (the rollout shares the actor's weights, so it only advances the
version). Step 2 has a judge error: one trajectory's second turn gets an infra_error result (injected
at the executor seam), which aborts it, so the batch has an odd row count as well.

For each step, the same trajectories go through the own trainer's prepare_step with the step's
weights: advantages, loss masks, old log-probs and the loss must equal what verl computed.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import os
import threading
import time
import warnings
import zlib
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from torch.testing import assert_close

pytest.importorskip("verl")
pytest.importorskip("transfer_queue")
pytest.importorskip("ray")

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    import ray
    import transfer_queue as tq
    from omegaconf import OmegaConf
    from tensordict import TensorDict
    from verl.trainer.ppo.v1 import get_trainer_cls
    from verl.trainer.ppo.v1.agent_loop_tq import AgentLoopWorkerTQ
    from verl.utils import tensordict_utils as tu
    from verl.utils.config import omega_conf_to_dataclass
    from verl.utils.torch_functional import entropy_from_logits, logprobs_from_logits
    from verl.workers.rollout.replica import TokenOutput
    from verl.workers.utils.losses import ppo_loss

    import drkernel.rl.verl  # noqa: F401  (registers the agent loop and the trainer, as verl's plugin does)
    import drkernel.rl.verl.agent_loop as agent_loop_module
    from drkernel.rl.verl.trainer import DrKernelTrainer

from drkernel.agent.env import KernelEnv
from drkernel.problems import load_suite
from drkernel.rl.config import TinyModelConfig
from drkernel.rl.losses import policy_loss
from drkernel.rl.rollout import RolloutBatch, TurnSample
from drkernel.rl.step import prepare_step
from drkernel.rl.tiny import build_tiny, builtin_variants
from drkernel.rl.trainer import Trainer
from drkernel.rl.verl.settings import run_config
from drkernel.rl.verl_data import write_parquet
from drkernel.server.launch import ServerProcess
from drkernel.types import EvalOutcome, EvalResult
from tests.rl.test_verl_recipe import _compose, _validate, recipe_overrides

pytestmark = pytest.mark.slow
log = logging.getLogger(__name__)

N, TURNS, PROMPTS, DP = 4, 2, 2, 7  # 2 prompts x 4 samples x 2 turns = 16 rows; dp 7 pads them to 21
RESPONSE = 8  # new tokens per turn
FAULT_STEP = 2  # the step whose first trajectory's second turn meets a judge error
SEED = 1  # the rollout sampling seed


# -- the rollout server: a tiny random-weights model, transformers' generate --------------------------
class HFServer:
    """Answers as verl's LLMServerClient.generate: sampled token ids, their log-probs, weight versions."""

    def __init__(self, model, tok, seed: int = 0) -> None:
        self.model, self.tok, self.seed = model, tok, seed
        self.version = 0  # the weights' global step (the checkpoint manager advances it)
        self.calls: dict[int, int] = {}  # per prompt: how often it was sampled
        self.lock = threading.Lock()

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        with self.lock, torch.no_grad():
            # seeded by the prompt and its count, not by arrival order: the sessions of one prompt run
            # concurrently, so the step's answers are the same whatever order they arrive in
            key = zlib.crc32(str(list(prompt_ids)).encode())
            k = self.calls[key] = self.calls.get(key, -1) + 1
            torch.manual_seed(self.seed * 1_000_003 + key + 7919 * k)
            temperature = float(sampling_params.get("temperature", 1.0))
            prompt = torch.tensor([list(prompt_ids)])
            out = self.model.generate(
                prompt, attention_mask=torch.ones_like(prompt), do_sample=True, temperature=temperature,
                top_p=1.0, top_k=0, max_new_tokens=RESPONSE, output_logits=True,
                return_dict_in_generate=True, pad_token_id=self.tok.pad_token_id,
                eos_token_id=self.tok.eos_token_id,
            )
            ids = out.sequences[0, prompt.shape[1]:].tolist()
            if self.tok.eos_token_id in ids:
                ids = ids[: ids.index(self.tok.eos_token_id) + 1]
            logits = torch.stack([lg[0] for lg in out.logits[: len(ids)]]) / temperature
            logprobs = torch.log_softmax(logits.float(), -1).gather(-1, torch.tensor(ids).view(-1, 1))
        v = self.version
        return TokenOutput(token_ids=ids, log_probs=logprobs.view(-1).tolist(), stop_reason="completed",
                           extra_fields={"global_steps": v, "min_global_steps": v, "max_global_steps": v})


class WeightSync:
    """verl's CheckpointEngineManager where rollout and actor share one model: the version moves."""

    def __init__(self, server: HFServer) -> None:
        self.server = server

    def update_weights(self, global_steps: int) -> None:
        self.server.version = int(global_steps)

    def sleep_replicas(self) -> None:
        pass


# -- the actor worker group: one CPU process, verl's log-prob and loss functions ----------------------
class CpuActor:
    """verl's actor worker group on one process: compute_log_prob and update_actor over TransferQueue."""

    def __init__(self, model, actor_config) -> None:
        self.model, self.actor_config = model, actor_config
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
        self._dispatch_info: dict = {}
        self.losses: list[float] = []

    def _query_dispatch_info(self, role):
        return list(range(DP))  # verl pads the batch to a multiple of this data-parallel size

    def _forward(self, input_ids: torch.Tensor, temperature: float):
        logits = self.model(input_ids.view(1, -1)).logits[0].float() / temperature
        shifted = torch.cat([input_ids[1:], input_ids[:1]])  # position j scores token j + 1
        return logprobs_from_logits(logits, shifted), entropy_from_logits(logits)

    def compute_log_prob(self, batch):
        data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=["input_ids"])
        temperature = float(batch.extra_info.get("temperature", 1.0))
        lps, ents = [], []
        with torch.no_grad():
            for ids in data["input_ids"].unbind():
                lp, ent = self._forward(ids, temperature)
                lps.append(lp)
                ents.append(ent)
        fields = TensorDict({"log_probs": torch.nested.as_nested_tensor(lps, layout=torch.jagged),
                             "entropy": torch.nested.as_nested_tensor(ents, layout=torch.jagged)},
                            batch_size=len(lps))
        tq.kv_batch_put(keys=batch.keys, partition_id=batch.partition_id, fields=fields)
        return batch

    def update_actor(self, batch):
        names = ["input_ids", "prompts", "responses", "response_mask", "old_log_probs", "advantages"]
        data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=names)
        temperature = float(batch.extra_info.get("temperature", 1.0))
        self.optimizer.zero_grad()
        lps = [self._forward(ids, temperature)[0] for ids in data["input_ids"].unbind()]
        out = {"log_probs": torch.nested.as_nested_tensor(lps, layout=torch.jagged)}
        # what verl's engine adds before calling the loss (one process holds every data-parallel shard)
        tu.assign_non_tensor(data, dp_size=1, batch_num_tokens=int(data["response_mask"].values().sum()),
                             global_batch_size=batch.extra_info["global_batch_size"])
        loss, _ = ppo_loss(self.actor_config, out, data)
        loss.backward()
        self.optimizer.step()
        self.losses.append(float(loss.detach()))
        return {"metrics": {"pg_loss": [float(loss.detach())], "mfu": [0.0]}}


# -- the judge seam: the real server, each distinct kernel judged once, one injected judge error -------
class RecordingJudge:
    def __init__(self, inner) -> None:
        self.inner = inner
        self.cache: dict[tuple[str, str], EvalResult] = {}
        self.lock = threading.Lock()
        self.step = 0
        self.faults: list[str] = []
        self.judged = 0

    def evaluate(self, requests):
        out = []
        for r in requests:
            if self.step == FAULT_STEP and r.task_id.endswith(".0/t1") and not self.faults:
                self.faults.append(r.task_id)
                out.append(EvalResult.failure(EvalOutcome.INFRA_ERROR, "judge_error", "injected",
                                              task_id=r.task_id))
                continue
            key = (r.reference_code, r.kernel_code)
            with self.lock:
                if key not in self.cache:
                    self.cache[key] = self.inner.evaluate([r])[0]
                    self.judged += 1
                out.append(copy.deepcopy(self.cache[key]))
        return out

    def close(self) -> None:
        pass


# -- the in-process agent-loop manager: verl's AgentLoopWorkerTQ class, not as a Ray actor -------------
class AgentLoops:
    def __init__(self, config, server) -> None:
        worker_cls = AgentLoopWorkerTQ.__ray_metadata__.modified_class
        self.worker = worker_cls(config, server, None, [])  # [] reward workers: the loop sets the reward
        # the tiny model is a Qwen2 architecture with a word-level tokenizer of its own, not Qwen's: verl's
        # Qwen token builder (chosen by the model type) needs Qwen's newline token; use the generic one
        self.worker.hf_model_type = None
        self.loop = asyncio.new_event_loop()

    def generate_sequences(self, batch) -> None:
        async def run():
            await self.worker.generate_sequences(batch)
            while self.worker.background_tasks:
                await asyncio.gather(*list(self.worker.background_tasks))

        self.loop.run_until_complete(run())

    def close(self) -> None:
        self.loop.close()


class RecordingTrainer(DrKernelTrainer):
    """DrKernelTrainer, recording what each step computed for the comparison."""

    judge: RecordingJudge
    envs: list[KernelEnv]

    def on_step_begin(self):
        super().on_step_begin()
        self.judge.step = self.global_steps
        self.envs.clear()

    def _compute_advantage(self, batch, metrics):
        batch = super()._compute_advantage(batch, metrics)
        fields = ["prompts", "responses", "extra_fields", "rollout_log_probs", "old_log_probs",
                  "advantages", "loss_mask"]
        data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=fields)
        rows = {}
        for i, key in enumerate(batch.keys):
            rows[key] = {
                "padding": bool(batch.tags[i].get("is_padding", False)),
                "extra": data["extra_fields"][i],
                **{f: data[f][i].clone() for f in fields if f != "extra_fields"},
            }
        self.steps.append({"step": self.global_steps, "rows": rows, "metrics": dict(metrics),
                           "model": copy.deepcopy(self.actor_rollout_wg.model),
                           "envs": list(self.envs)})
        return batch

    def _update_actor(self, batch, metrics):
        done = len(self.actor_rollout_wg.losses)
        batch = super()._update_actor(batch, metrics)
        losses = self.actor_rollout_wg.losses
        self.steps[-1]["loss"] = losses[-1] if len(losses) > done else None
        return batch

    def _compute_metrics(self, batch, metrics, timing_raw, global_steps, epoch):
        super()._compute_metrics(batch, metrics, timing_raw, global_steps, epoch)
        self.steps[-1]["final_metrics"] = dict(metrics)


def _overrides(model_dir: Path, data: Path, judge_url: str) -> list[str]:
    keep = [o for o in recipe_overrides("run_8b.sh") if not o.startswith("+drkernel.")]
    drk = ",".join(f"'{o}'" for o in ["judge.executor=http", f"judge.base_url={judge_url}",
                                      f"rollout.max_turns={TURNS}", "rl.dynamic_sampling.enabled=false",
                                      "trainer.seed=3"])
    return [
        *keep, "+drkernel.recipe=debug_cpu", f"+drkernel.overrides=[{drk}]",
        f"actor_rollout_ref.model.path={model_dir}", f"data.train_files={data}", f"data.val_files={data}",
        f"data.train_batch_size={PROMPTS}", f"actor_rollout_ref.rollout.n={N}",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={PROMPTS}",
        "data.max_prompt_length=4096", f"data.max_response_length={RESPONSE}",
        "actor_rollout_ref.rollout.prompt_length=4096",
        f"actor_rollout_ref.rollout.response_length={RESPONSE}",
        "actor_rollout_ref.model.enable_gradient_checkpointing=false",
        "actor_rollout_ref.actor.ulysses_sequence_parallel_size=1",
        "actor_rollout_ref.actor.fsdp_config.param_offload=false",
        "actor_rollout_ref.actor.fsdp_config.optimizer_offload=false",
        "trainer.nnodes=1", "trainer.n_gpus_per_node=1", "trainer.total_training_steps=2",
        "trainer.val_before_train=false", "trainer.test_freq=0", "trainer.save_freq=0",
        "trainer.logger=[console]", "trainer.resume_mode=disable", "data.dataloader_num_workers=0",
        "data.shuffle=false",
    ]


def _own_step(record, cfg, tok):
    """The same trajectories through the own trainer's step, with the step's weights."""
    envs = sorted(record["envs"], key=lambda e: (e.problem.name, e.sample))
    uids = list(dict.fromkeys(e.episode for e in envs))  # verl's prompt uid: one group per prompt
    problem_of = {e.episode: e.problem for e in envs}
    batch = RolloutBatch(problems=[problem_of[u] for u in uids],
                         group_ids=[uids.index(e.episode) for e in envs],
                         trajectories=[e.trajectory for e in envs])
    where = {(e.episode, e.sample): b for b, e in enumerate(envs)}
    for key, row in record["rows"].items():
        ef = row["extra"]
        if row["padding"] or ef.get("drkernel_empty"):
            continue
        b = where[(ef["drkernel_prompt"], ef["drkernel_trajectory"])]
        batch.samples.append(TurnSample(b, ef["drkernel_turn"], row["prompts"].tolist(),
                                        row["responses"].tolist(), row["rollout_log_probs"].tolist()))
    groups_ok = Trainer._groups_ok(SimpleNamespace(config=cfg), batch)  # type: ignore[arg-type]
    own = prepare_step(batch, groups_ok, record["model"], tok, cfg, step=record["step"])
    return own, where


def test_two_verl_steps_on_the_cpu_match_the_own_trainer(tmp_path, monkeypatch):
    t0 = time.monotonic()
    problems = load_suite("builtin")[:PROMPTS]
    model, tok = build_tiny(TinyModelConfig(), builtin_variants(problems, ["honest", "passthrough"]), seed=0)
    model_dir = tmp_path / "model"
    model.save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    data = write_parquet(problems, tmp_path / "train.parquet")

    envs: list[KernelEnv] = []

    class TrackedEnv(KernelEnv):
        def reset(self, *args, **kwargs):
            envs.append(self)
            return super().reset(*args, **kwargs)

    monkeypatch.setattr(agent_loop_module, "KernelEnv", TrackedEnv)
    monkeypatch.setenv("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", "0")

    # the sandbox judge isolates candidates as root (CI); elsewhere --insecure: the candidates are the
    # project's own built-in kernels, the only code the tiny model's vocabulary can write
    extra = ["--workers", "1", *([] if os.geteuid() == 0 else ["--insecure"])]
    server = ServerProcess(tmp_path / "judge.db", extra=extra, log_path=tmp_path / "judge.log")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        server.start()
        if ray.is_initialized():  # an earlier test of the session left its Ray up (the executors' fixture)
            ray.shutdown()
        ray.init(address="local", num_cpus=4, _node_ip_address="127.0.0.1", include_dashboard=False,
                 log_to_driver=False)
        try:
            cfg = _compose(_overrides(model_dir, data, server.url))
            _validate(cfg)  # main_ppo's checks before it starts Ray
            run_cfg = run_config(cfg)
            judge = RecordingJudge(agent_loop_module.shared_executor(run_cfg))
            monkeypatch.setattr(agent_loop_module, "shared_executor", lambda _cfg: judge)
            tq.init(OmegaConf.create({"backend": {"storage_backend": "SimpleStorage", "SimpleStorage": {
                "total_storage_size": 1000, "num_data_storage_units": 1}}}))
            try:
                trainer = _run(cfg, model, tok, judge, envs)
            finally:
                tq.close()
        finally:
            ray.shutdown()
            server.stop()
    elapsed = time.monotonic() - t0

    # -- what verl ran --------------------------------------------------------------------------------
    assert [s["step"] for s in trainer.steps] == [1, 2]
    summary = [(r["step"], r["loss"], r["metrics"].get("drkernel/trained_rows")) for r in trainer.steps]
    log.info("verl CPU run: (step, loss, trained rows) %s, %.0f s", summary, elapsed)
    for r in trainer.steps:
        ours = {k: v for k, v in r["metrics"].items() if k.startswith("drkernel/")}
        log.info("step %d: %s", r["step"], ours)
    # both steps update through verl's ppo_loss (the group filter is off: with 4 samples of a tiny random
    # model, a step's last-turn rewards often all tie, and the filter would leave nothing to train)
    assert all(loss is not None and rows > 0 for _, loss, rows in summary), summary
    assert judge.judged > 0 and len(judge.faults) == 1 and judge.faults[0].endswith(".0/t1")
    for record in trainer.steps:
        rows = record["rows"]
        real = [k for k, r in rows.items() if not r["padding"]]
        pads = [k for k, r in rows.items() if r["padding"]]
        assert len(rows) % DP == 0 and pads, "verl padded the batch to its data-parallel size"
        assert record["metrics"]["drkernel/rows"] == len(real)
        # every trajectory ran its turns (a judge task id reused across steps once aborted them, HTTP 409)
        assert len(real) == PROMPTS * N * TURNS - (record["step"] == FAULT_STEP)
        for k in pads:
            assert not rows[k]["loss_mask"].any() and not rows[k]["advantages"].any()
        versions = {rows[k]["extra"]["max_global_steps"] for k in real}
        assert versions == {record["step"] - 1}  # sampled with the step's weights (sync)
        assert "training/off_policy/trajectory_staleness/max" in record["final_metrics"]
    step2 = trainer.steps[1]["rows"]
    aborted = [r for r in step2.values() if not r["padding"] and r["extra"]["drkernel_aborted"]]
    assert len(aborted) == 1 and aborted[0]["extra"]["drkernel_turn"] == 0
    assert not aborted[0]["loss_mask"].any()  # an aborted trajectory trains nothing

    # -- the own trainer on the same trajectories -------------------------------------------------------
    own_cfg = run_config(cfg)
    any_signal = False
    for record in trainer.steps:
        verl_loss = record["loss"]
        own, where = _own_step(record, own_cfg, tok)
        for row in record["rows"].values():
            if row["padding"]:
                continue
            ef = row["extra"]
            b, t = where[(ef["drkernel_prompt"], ef["drkernel_trajectory"])], ef["drkernel_turn"]
            i, k = b * TURNS + t, row["responses"].numel()
            own_mask = own.loss_mask[i, :k]
            assert row["loss_mask"].bool().tolist() == own_mask.tolist()
            expect = own.advantages[b, t].float() * own_mask.float()
            assert_close(row["advantages"].float(), expect, rtol=0, atol=1e-6)
            if own_mask.any():
                assert_close(row["old_log_probs"].float(), own.old_logp[i, :k].float(), rtol=0, atol=1e-5)
                any_signal |= bool(own.advantages[b, t] != 0)
        own_loss, _ = policy_loss(own.old_logp, own.old_logp, own.advantages.reshape(-1), own.loss_mask,
                                  own_cfg.rl.loss)
        assert_close(torch.tensor(verl_loss, dtype=torch.float64), own_loss.double().detach(),
                     rtol=1e-5, atol=1e-7)
    assert any_signal, "some trained turn carries a non-zero advantage"
    assert elapsed < 600


def _run(cfg, model, tok, judge, envs):
    trainer = get_trainer_cls(cfg.trainer.v1.trainer_mode)  # what main_ppo's TaskRunnerV1 does
    assert trainer is DrKernelTrainer
    trainer = RecordingTrainer(config=cfg)
    trainer.judge, trainer.envs, trainer.steps = judge, envs, []
    # PPOTrainer._setup without the GPU parts (resource pools, FSDP workers, vLLM replicas)
    trainer._init_tokenizer()
    trainer._init_dataloader()
    trainer._init_dump_executor()
    actor_cfg = omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)
    trainer.actor_rollout_wg = CpuActor(model, actor_cfg)
    trainer.reward_loop_manager = SimpleNamespace(reward_loop_worker_handles=[])
    trainer._get_n_gpus_for_throughput = lambda: 1  # verl counts the GPUs of its resource pools
    rollout = HFServer(model, tok, seed=SEED)
    trainer.checkpoint_manager = WeightSync(rollout)
    trainer.checkpoint_manager.sleep_replicas()
    trainer._load_checkpoint()
    trainer.on_init_end()
    loops = AgentLoops(cfg, rollout)
    try:
        trainer.fit(loops)
    finally:
        loops.close()
    return trainer

