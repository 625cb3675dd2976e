"""The single-node multi-turn RL loop: rollouts through the judge -> masks and advantages -> update.

Per step (docs/paper_spec.md §8): n rollouts per prompt over up to T turns; turn rewards (with the profiling
ratio); void-turn masks; trainer log-probs recomputed (pi_old); MRS, PRS; the dynamic-sampling group
filter; TRLOO advantages; one clipped update. Then metrics (JSONL, TensorBoard) and a checkpoint.
"""

from __future__ import annotations

import logging
import random
import secrets
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

import torch

from drkernel.agent.env import EnvConfig
from drkernel.agent.extraction import why_not_judged
from drkernel.agent.feedback import FeedbackConfig
from drkernel.agent.policy import SamplingParams
from drkernel.agent.trajectories import save_trajectories
from drkernel.errors import ExecutorError, PolicyError
from drkernel.executors.base import Executor
from drkernel.executors.build import ClientExecutorConfig
from drkernel.executors.caching import CachingExecutor
from drkernel.rl.build import (
    build_judge,
    build_model,
    build_sampler,
    load_pretrained,
    training_problems,
    validation_problems,
)
from drkernel.rl.checkpoint import (
    TrainState,
    latest_checkpoint,
    load_checkpoint,
    rng_state,
    save_checkpoint,
    set_rng_state,
    torch_seed,
)
from drkernel.rl.config import RunConfig, save_config, to_dict
from drkernel.rl.config_layout import judge_verdict_scope
from drkernel.rl.filters import dynamic_sampling_filter
from drkernel.rl.masks import last_present_values
from drkernel.rl.progress import Progress, format_duration
from drkernel.rl.rewards import turn_rewards
from drkernel.rl.rollout import RolloutBatch, Sampler, collect_rollouts
from drkernel.rl.runlog import RunLog, require_wandb
from drkernel.rl.step import StepTensors, batch_metrics, prepare_step
from drkernel.rl.update import backward_rows
from drkernel.types import Problem
from drkernel.wording import counted

__all__ = ["Trainer", "cached_executor"]

log = logging.getLogger(__name__)


def cached_executor(executor: Executor, judge: ClientExecutorConfig, path: Path) -> CachingExecutor:
    """`executor` behind the run's cache of verdicts (`rollout.cache_evaluations`), each kept under the
    judge config that gave it (its settings that decide verdicts): a run folder judged again through
    another judge (the fake's every-kernel-correct, another device) reuses none of the other's verdicts;
    the same judge at another address, or with other transport settings, reuses them all."""
    return CachingExecutor(executor, path, scope=judge_verdict_scope(judge))


@dataclass(slots=True)
class _Parts:
    """Components a caller may supply instead of building them from the config."""

    model: Any = None
    tokenizer: Any = None
    problems: list[Problem] | None = None
    validation: list[Problem] | None = None
    executor: Executor | None = None
    sampler: Sampler | None = None


class Trainer:
    """`Trainer(config, run_dir).fit()`; resumes from run_dir/checkpoints when one is there."""

    def __init__(self, config: RunConfig, run_dir: str | Path, *, progress: Progress | None = None,
                 **parts: Any) -> None:
        self.config = config
        require_wandb(config.log.wandb)  # before the run's folder: as `drkernel train rl` says it
        # in every judge task id, with the step and round: a run resumed in the same step, or another
        # run against the same judge server, never reuses an id (the server refuses one with a new body)
        self._run_tag = secrets.token_hex(3)
        # silent unless given one (the CLI gives one on stderr)
        self.progress = progress if progress is not None else Progress(enabled=False)
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        given = _Parts(**parts)
        cfg = config
        random.seed(cfg.trainer.seed)
        torch.manual_seed(torch_seed(cfg.trainer.seed))
        self.problems = given.problems if given.problems is not None else training_problems(cfg.data)
        self.validation = given.validation if given.validation is not None else validation_problems(cfg.data)
        # the judge before the model: a judge that cannot be had is said before minutes of loading
        executor = given.executor if given.executor is not None else build_judge(cfg.judge)
        try:
            self._start(cfg, given, executor)
        except BaseException:
            executor.close()  # its judges (processes of a local pool) end with the run that failed to start
            raise

    def _start(self, cfg: RunConfig, given: _Parts, executor: Executor) -> None:
        self.model, self.tokenizer = self._model(given)
        params = [p for p in self.model.parameters() if p.requires_grad]
        o = cfg.optim
        self.optimizer = torch.optim.AdamW(params, lr=o.lr, betas=o.betas, weight_decay=o.weight_decay)
        ckpt = latest_checkpoint(self.ckpt_dir)
        self.state = load_checkpoint(ckpt, self.optimizer) if ckpt is not None else TrainState()
        if ckpt is not None:
            log.info("resumed from %s (step %d)", ckpt, self.state.step)
        self._saved_step = self.state.step  # the step the newest checkpoint holds (0: none needed)
        self._stopping = False
        if cfg.rollout.cache_evaluations:
            executor = cached_executor(executor, cfg.judge, self.run_dir / "eval_cache.jsonl")
        self.executor = executor
        self.sampler = given.sampler or build_sampler(cfg.rollout, self.model, self.tokenizer)
        self.env_config = EnvConfig(
            max_turns=cfg.rollout.max_turns,
            eval_options=cfg.eval_options(),
            reward=cfg.reward,
            feedback=FeedbackConfig(max_chars=cfg.rollout.feedback_chars),
        )
        self.runlog = RunLog(self.run_dir, resume_step=self.state.step, tensorboard=cfg.log.tensorboard,
                             wandb=cfg.log.wandb, wandb_project=cfg.log.wandb_project, run_name=cfg.name,
                             config=to_dict(cfg))
        save_config(cfg, self.run_dir / "config.json")

    @property
    def ckpt_dir(self) -> Path:
        return self.run_dir / "checkpoints"

    def _model(self, given: _Parts) -> tuple[Any, Any]:
        cfg = self.config.model
        ckpt = latest_checkpoint(self.ckpt_dir)
        if ckpt is not None:  # the checkpoint's weights and tokenizer win over anything given
            model, tokenizer = load_pretrained(str(ckpt / "model"), dtype=cfg.dtype)
            from drkernel.device import resolve_device

            return model.to(resolve_device(cfg.device)), tokenizer
        if given.model is not None:
            return given.model, given.tokenizer
        problems = list({p.name: p for p in [*self.problems, *self.validation]}.values())
        return build_model(cfg, problems, seed=self.config.trainer.seed)

    # -- the loop ----------------------------------------------------------------------------------
    def fit(self) -> list[dict[str, Any]]:
        """Run until trainer.steps are completed; returns the metrics of the steps run here."""
        return list(self.fit_iter())

    def fit_iter(self) -> Iterator[dict[str, Any]]:
        """`fit`, yielding each step's metrics as soon as the step is done (and checkpointed).

        A step is done once its update is applied. One stopped before that (Ctrl-C, the model or the
        judge gone) is taken back to its start; one stopped after (in validation) is kept, its line
        without val/*. Either way the steps done are checkpointed before the exception goes on."""
        tc = self.config.trainer
        first, started = self.state.step, time.perf_counter()
        self._stopping = False
        while self.state.step < tc.steps:
            step = self.state.step + 1
            t0 = time.perf_counter()
            metrics = self._run_step(step)
            self._finish_step(step, metrics, t0)
            left = (time.perf_counter() - started) / (step - first) * (tc.steps - step)
            self.progress.line(f"step {step}/{tc.steps}: done in {format_duration(metrics['time/step_s'])}; "
                               f"about {format_duration(left)} left")
            log.info("step %d: reward %.3f, loss %.4g", step, metrics["reward/mean"], metrics["actor/loss"])
            yield {"step": step, **metrics}

    def _run_step(self, step: int) -> dict[str, Any]:
        """`step` up to its update: rollouts, scoring, gradients. A stop here (Ctrl-C, the model or the
        judge gone) takes the step back to its start, so that the rerun draws its prompts again."""
        start = (self.state.cursor, rng_state())
        try:
            metrics, tensors = self._prepare(step)
            t = time.perf_counter()
            metrics.update(self._gradients(tensors))
            metrics["time/update_s"] = time.perf_counter() - t
        except (KeyboardInterrupt, PolicyError, ExecutorError):
            self.optimizer.zero_grad(set_to_none=True)
            self.state.cursor = start[0]
            set_rng_state(start[1])
            self._save_unsaved()
            raise
        return metrics

    def _finish_step(self, step: int, metrics: dict[str, Any], t0: float) -> None:
        """The update applied (the step is done), its checkpoint when due, validation, its metrics line."""
        tc = self.config.trainer
        logged = False
        try:
            with _interrupts_deferred():  # the weights and the step count move together
                t = time.perf_counter()
                self._apply(metrics)
                self.state.step = step
                metrics["time/update_s"] += time.perf_counter() - t
            if step % tc.save_every == 0 or step == tc.steps:
                self._save()  # before validation: a stop there keeps the step
            if tc.validate_every and step % tc.validate_every == 0 and self.validation:
                on = counted(len(self.validation), "problem")
                self.progress.line(f"step {step}/{tc.steps}: validating on {on}")
                metrics.update(self.validate(step))
            metrics["time/step_s"] = time.perf_counter() - t0
            with _interrupts_deferred():
                self.runlog.write(step, metrics)
                logged = True
        except (KeyboardInterrupt, PolicyError, ExecutorError):  # validation needs the model and judge too
            if not logged and self.state.step == step:
                self.runlog.write(step, metrics)
            self._save_unsaved()
            raise

    def _save(self) -> None:
        save_checkpoint(self.ckpt_dir, self.state, self.model, self.tokenizer, self.optimizer,
                        keep=self.config.trainer.keep_checkpoints)
        self._saved_step = self.state.step

    def _save_unsaved(self) -> None:
        """Checkpoint the steps done since the last checkpoint (whatever trainer.save_every says)."""
        if self.state.step > self._saved_step:
            self._stopping = True  # a second Ctrl-C during this save stops without another
            self.progress.line(f"stopping: checkpointing step {self.state.step}")
            self._save()

    def _next_prompts(self, count: int) -> list[Problem]:
        """The next `count` prompts of a per-epoch shuffle; the cursor makes it resumable."""
        out = []
        n = len(self.problems)
        for _ in range(count):
            epoch, pos = divmod(self.state.cursor, n)
            gen = torch.Generator().manual_seed(torch_seed(self.config.trainer.seed * 100_003 + epoch))
            out.append(self.problems[int(torch.randperm(n, generator=gen)[pos])])
            self.state.cursor += 1
        return out

    def _rollouts(self) -> tuple[RolloutBatch, int]:
        """Roll out prompt groups until enough survive the group filter (docs/paper_spec.md §8)."""
        cfg = self.config
        want = cfg.trainer.prompts_per_step
        ro = cfg.rollout
        sampling = SamplingParams(temperature=ro.temperature, top_p=ro.top_p, max_tokens=ro.max_new_tokens)
        rounds: list[RolloutBatch] = []
        survivors = 0
        step = self.state.step + 1
        for r in range(cfg.rl.max_sampling_rounds):
            self.progress.line(f"step {step}/{cfg.trainer.steps}: "
                               f"rollouts{f' (round {r + 1})' if r else ''}, "
                               f"{counted(want, 'prompt')} x {counted(ro.n, 'sample')}, "
                               f"up to {counted(ro.max_turns, 'turn')}")
            batch = collect_rollouts(
                self._next_prompts(want), self.sampler, self.executor, n=ro.n,
                env_config=self.env_config, sampling=sampling, concurrency=ro.concurrency,
                progress=self.progress, episode=f"{self._run_tag}.s{step}r{r}",
            )
            rounds.append(batch)
            survivors += int(self._groups_ok(batch).sum().item())
            if survivors >= want * ro.n:
                break
        return RolloutBatch.concat(rounds), len(rounds)

    def _groups_ok(self, batch: RolloutBatch) -> torch.Tensor:
        """Trajectories [B] whose prompt group survives the dynamic-sampling filter."""
        ds = self.config.rl.dynamic_sampling
        tr = turn_rewards(
            batch.results(), self.config.reward, max_turns=self.config.rollout.max_turns
        )
        alive = ~torch.tensor(batch.aborted(), dtype=torch.bool)
        if not ds.enabled:
            return alive
        last = last_present_values(tr.rewards, tr.present)
        return dynamic_sampling_filter(
            last, torch.tensor(batch.group_ids), alive,
            std_threshold=ds.std_threshold, min_group_size=ds.min_group_size,
        )

    def _pick_groups(self, batch: RolloutBatch) -> torch.Tensor:
        """The group filter, then at most prompts_per_step surviving groups chosen at random."""
        ok = self._groups_ok(batch)
        gid = torch.tensor(batch.group_ids)
        alive = sorted({int(g) for g in gid[ok].tolist()})
        want = self.config.trainer.prompts_per_step
        if len(alive) > want:
            chosen = set(random.sample(alive, want))
            ok &= torch.tensor([int(g) in chosen for g in gid.tolist()], dtype=torch.bool)
        return ok

    def _prepare(self, step: int) -> tuple[dict[str, Any], StepTensors]:
        """The step up to its update: rollouts, scoring, the metrics of its batch, its rollouts saved."""
        cfg = self.config
        t0 = time.perf_counter()
        cache = self.executor if isinstance(self.executor, CachingExecutor) else None
        seen = (cache.hits, cache.misses) if cache is not None else (0, 0)  # this step's counts only
        batch, rounds = self._rollouts()
        _check_generated(batch, step)
        _check_judged(batch, step)
        t1 = time.perf_counter()
        groups_ok = self._pick_groups(batch)
        self.progress.line(f"step {step}/{cfg.trainer.steps}: scoring {counted(len(batch.samples), 'turn')} "
                           f"(log-probs, masks, advantages)")
        tensors = prepare_step(batch, groups_ok, self.model, self.tokenizer, cfg, step)
        t2 = time.perf_counter()
        self.progress.line(f"step {step}/{cfg.trainer.steps}: "
                           f"update on {counted(int(tensors.loss_mask.any(-1).sum()), 'row')}, "
                           f"{counted(int(tensors.loss_mask.sum()), 'token')}")
        metrics = batch_metrics(batch, tensors, cfg)
        metrics.update({
            "data/cursor": self.state.cursor,
            "data/sampling_rounds": rounds,
            "time/rollout_s": t1 - t0,
            "time/generate_s": batch.generate_s,
            "time/judge_s": batch.judge_s,
            "time/score_s": t2 - t1,
        })
        if cache is not None:
            metrics["judge/cache_hits"] = cache.hits - seen[0]
            metrics["judge/cache_misses"] = cache.misses - seen[1]
        if cfg.log.save_rollouts:
            (self.run_dir / "rollouts").mkdir(exist_ok=True)
            save_trajectories(self.run_dir / "rollouts" / f"step_{step:06d}.jsonl", batch.trajectories)
        return metrics, tensors

    def _lr(self, step: int) -> float:
        o, steps = self.config.optim, self.config.trainer.steps
        warm = int(o.warmup_ratio * steps)
        if step <= warm:
            return o.lr * step / max(warm, 1)
        if o.schedule == "cosine":
            import math

            frac = (step - warm) / max(steps - warm, 1)
            return o.lr * 0.5 * (1 + math.cos(math.pi * frac))
        return o.lr

    def _gradients(self, t: StepTensors) -> dict[str, Any]:
        """The gradients of the step's loss, clipped, and the learning rate for `_apply`
        (docs/paper_spec.md §5.5: ppo_epochs 1, one mini-batch)."""
        cfg = self.config
        self.optimizer.zero_grad(set_to_none=True)
        lm = backward_rows(
            self.model, t.rows, t.old_logp, t.advantages.reshape(-1), t.loss_mask, cfg.rl.loss,
            token_budget=cfg.trainer.micro_batch_tokens, temperature=cfg.rollout.temperature or 1.0,
        )
        trained = bool(t.loss_mask.any())
        grad_norm = float("nan")
        lr = self._lr(self.state.step + 1)
        if trained:
            params = [p for p in self.model.parameters() if p.requires_grad]
            grad_norm = float(torch.nn.utils.clip_grad_norm_(params, cfg.optim.grad_clip).item())
            for group in self.optimizer.param_groups:
                group["lr"] = lr
        return {
            **{f"actor/{k}": v for k, v in lm.items()},
            "actor/grad_norm": grad_norm,
            "actor/lr": lr,
            "actor/skipped": 0 if trained else 1,
            "actor/trained_rows": int(t.loss_mask.any(-1).sum().item()),
            "actor/trained_tokens": int(t.loss_mask.sum().item()),
        }

    def _apply(self, metrics: dict[str, Any]) -> None:
        """The optimizer step on the gradients `_gradients` left (none where nothing was trained)."""
        if not metrics["actor/skipped"]:
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)

    # -- validation ---------------------------------------------------------------------------------
    def validate(self, step: int) -> dict[str, Any]:
        """Fast@p of the current model on the validation suite, through `drkernel bench`'s runner."""
        from drkernel.agent.cli_bench import run_bench
        from drkernel.agent.loop import LoopConfig

        cfg = self.config
        policy = getattr(self.sampler, "policy", self.sampler)
        sampling = SamplingParams(
            temperature=cfg.rollout.temperature,
            top_p=cfg.trainer.validation_top_p,
            max_tokens=cfg.rollout.max_new_tokens,
        )
        loop = LoopConfig(
            env=self.env_config, sampling=sampling, concurrency=cfg.rollout.concurrency, model=cfg.name
        )
        out = self.run_dir / "validation" / f"step_{step:06d}"
        summary = run_bench(self.validation, policy, self.executor, loop, out,  # type: ignore[arg-type]
                            samples=cfg.trainer.validation_samples, progress=False)
        last = summary.get("last_turn") or {}
        fp = last.get("fast_p", {})
        return {
            "val/fast@1": fp.get("1"),
            "val/fast@1.2": fp.get("1.2"),
            "val/correct": last.get("correct"),
            "val/hacked": last.get("hacked"),
        }

    def close(self) -> None:
        self.runlog.close()
        self.executor.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        try:
            if exc_type is KeyboardInterrupt and not self._stopping:  # Ctrl-C in the caller, between steps
                self._save_unsaved()
        finally:
            self.close()


@contextmanager
def _interrupts_deferred() -> Iterator[None]:
    """Ctrl-C (SIGINT) waits for the end of the block, then is raised as usual (main thread only)."""
    previous = signal.getsignal(signal.SIGINT)
    if threading.current_thread() is not threading.main_thread() or previous is None:
        yield  # (a handler set outside Python cannot be put back)
        return
    held: list[int] = []
    signal.signal(signal.SIGINT, lambda signum, frame: held.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if held:
            signal.raise_signal(signal.SIGINT)


def _check_generated(batch: RolloutBatch, step: int) -> None:
    """A step whose every rollout failed at generation has nothing to train on: the model server went
    away (or answers errors only). Each such step logged reward nan and the run went on, exit 0."""
    errors = [t.error for t in batch.trajectories]
    if batch.samples or not errors or not all(e and e.startswith("PolicyError") for e in errors):
        return
    raise PolicyError(f"step {step}: the generation of every rollout failed, nothing to train on "
                      f"({str(errors[0]).removeprefix('PolicyError: ')[:300]}); the run stops after step "
                      f"{step - 1}: rerun the same command to continue once the model answers")


_JUDGE_ERRORS = ("ExecutorError", "WorkerLost", "EvalTimeout", "Overloaded")  # drkernel.errors


def _check_judged(batch: RolloutBatch, step: int) -> None:
    """A step whose every evaluation failed (the judge's server went away, or its judges cannot start)
    has nothing to train on. Each such step logged reward 0 with no group kept, and the run went on."""
    if any(why_not_judged(t.result) is None for traj in batch.trajectories for t in traj.turns):
        return  # the judge gave a verdict
    errors = [t.error for t in batch.trajectories if t.error and t.error.startswith(_JUDGE_ERRORS)]
    if not errors:
        return
    raise ExecutorError(f"step {step}: the judge gave no verdict for any of the step's kernels "
                        f"({str(errors[0])[:300]}); the run stops after step {step - 1}: rerun the same "
                        "command to continue once the judge answers")
