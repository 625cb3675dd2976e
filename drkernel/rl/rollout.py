"""Problems x n samples -> multi-turn episodes through KernelEnv -> turn records with token ids.

Episodes advance in lockstep, one turn at a time: every open episode's prompt is generated in one
batch (ModelSampler: the trainer's own model; PolicySampler: any agent Policy such as a vLLM server
serving the current weights), then the turns are judged concurrently through the env's Executor.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

from drkernel.agent.env import EnvConfig, KernelEnv
from drkernel.agent.policy import Completion, Policy, SamplingParams
from drkernel.agent.trajectories import Trajectory
from drkernel.errors import DrKernelError, PolicyError
from drkernel.executors.base import Executor
from drkernel.rl.progress import Progress, format_duration
from drkernel.types import EvalResult, Problem
from drkernel.wording import counted

__all__ = [
    "ModelSampler",
    "PolicySampler",
    "RolloutBatch",
    "Sampler",
    "TurnSample",
    "collect_rollouts",
    "render_messages",
]

log = logging.getLogger(__name__)

Messages = list[dict[str, str]]


def render_messages(tokenizer: Any, messages: Messages) -> str:
    """Prompt text for the next assistant turn: the chat template, or role-tagged plain text."""
    if getattr(tokenizer, "chat_template", None):
        return str(tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True))
    return "".join(f"<|{m['role']}|>\n{m['content']}\n" for m in messages) + "<|assistant|>\n"


class Sampler(Protocol):
    def sample(self, conversations: list[Messages], sampling: SamplingParams) -> list[Completion]:
        """One completion per conversation, with `token_ids`, `logprobs` (or None) and
        `extra["prompt_ids"]` (the exact prompt tokens the trainer must score)."""
        ...

    def count_tokens(self, text: str) -> int: ...


class ModelSampler:
    """Batched sampling from a local transformers model (the one being trained).

    Log-probs are log_softmax(logits / temperature) of the sampled tokens, the same quantity the
    trainer recomputes, so MRS measures the real generation-vs-training mismatch (docs/paper_spec.md §6).
    """

    def __init__(self, model: Any, tokenizer: Any, *, max_prompt_tokens: int, batch_size: int = 64) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.max_prompt_tokens = max_prompt_tokens
        self.batch_size = batch_size
        self._lock = threading.Lock()

    def count_tokens(self, text: str) -> int:
        return len(self.tokenizer.encode(text, add_special_tokens=False))

    def encode(self, messages: Messages) -> list[int]:
        ids = self.tokenizer(render_messages(self.tokenizer, messages), add_special_tokens=False)["input_ids"]
        return [int(x) for x in ids]

    def sample(self, conversations: list[Messages], sampling: SamplingParams) -> list[Completion]:
        prompts = [self.encode(m) for m in conversations]
        out: list[Completion | None] = [None] * len(prompts)
        todo = []
        for i, ids in enumerate(prompts):
            if len(ids) > self.max_prompt_tokens:  # docs/paper_spec.md §2.7: an empty turn, reward 0
                out[i] = Completion(text="", finish_reason="prompt_overlong", token_ids=[], logprobs=[],
                                    extra={"prompt_ids": ids})
            else:
                todo.append(i)
        with self._lock:
            for start in range(0, len(todo), self.batch_size):
                chunk = todo[start : start + self.batch_size]
                for i, c in zip(chunk, self._generate([prompts[i] for i in chunk], sampling), strict=True):
                    out[i] = c
        return [c for c in out if c is not None]

    def generate(
        self, messages: Messages, n: int = 1, sampling: SamplingParams | None = None
    ) -> list[Completion]:
        """The agent's Policy protocol (used by validation through `drkernel bench` machinery)."""
        return self.sample([messages] * n, sampling or SamplingParams())

    def _generate(self, prompts: list[list[int]], sp: SamplingParams) -> list[Completion]:
        import torch

        tok = self.tokenizer
        pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        device = next(self.model.parameters()).device
        width = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), width), pad, dtype=torch.long)
        mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for r, p in enumerate(prompts):  # left padding for generation
            ids[r, width - len(p) :] = torch.tensor(p)
            mask[r, width - len(p) :] = 1
        kwargs: dict[str, Any] = {"do_sample": False}
        if sp.temperature > 0:
            kwargs = {"do_sample": True, "temperature": sp.temperature, "top_p": sp.top_p, "top_k": 0}
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.no_grad():
                gen = self.model.generate(
                    input_ids=ids.to(device), attention_mask=mask.to(device), max_new_tokens=sp.max_tokens,
                    return_dict_in_generate=True, output_logits=True, pad_token_id=pad,
                    eos_token_id=tok.eos_token_id, **kwargs,
                )
        except (RuntimeError, ValueError) as exc:
            raise PolicyError(f"generation failed: {exc}") from exc
        finally:
            self.model.train(was_training)
        new = gen.sequences[:, width:].cpu()
        temp = sp.temperature if sp.temperature > 0 else 1.0
        logits = torch.stack(gen.logits, dim=1).float().cpu() / temp
        logp = torch.log_softmax(logits, dim=-1).gather(-1, new.unsqueeze(-1)).squeeze(-1)
        return [self._completion(new[r], logp[r], prompts[r]) for r in range(len(prompts))]

    def _completion(self, new: Any, logp: Any, prompt: list[int]) -> Completion:
        eos = self.tokenizer.eos_token_id
        ids = [int(x) for x in new.tolist()]
        finish = "length"
        if eos is not None and eos in ids:
            ids, finish = ids[: ids.index(eos) + 1], "stop"
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        return Completion(
            text=text, finish_reason=finish, token_ids=ids, logprobs=[float(x) for x in logp[: len(ids)]],
            prompt_tokens=len(prompt), completion_tokens=len(ids), extra={"prompt_ids": prompt},
        )


class PolicySampler:
    """Any agent Policy (e.g. OpenAIPolicy on a vLLM/SGLang server that serves the current weights).

    Prompt and response tokens come from the trainer's tokenizer; the server's log-probs are used
    when it returns one per response token, else MRS has nothing to compare and keeps the sample.
    """

    def __init__(
        self, policy: Policy, tokenizer: Any, *, max_prompt_tokens: int, concurrency: int = 32
    ) -> None:
        self.policy = policy
        self.tokenizer = tokenizer
        self.max_prompt_tokens = max_prompt_tokens
        self.concurrency = concurrency

    def count_tokens(self, text: str) -> int:
        return len(self.tokenizer.encode(text, add_special_tokens=False))

    def _one(self, messages: Messages, sp: SamplingParams) -> Completion:
        text = render_messages(self.tokenizer, messages)
        prompt = [int(x) for x in self.tokenizer(text, add_special_tokens=False)["input_ids"]]
        if len(prompt) > self.max_prompt_tokens:
            return Completion(text="", finish_reason="prompt_overlong", token_ids=[], logprobs=[],
                              extra={"prompt_ids": prompt})
        c = self.policy.generate(messages, 1, sp)[0]
        ids = c.token_ids
        if ids is None:
            ids = [int(x) for x in self.tokenizer(c.text, add_special_tokens=False)["input_ids"]]
            if c.finish_reason == "stop" and self.tokenizer.eos_token_id is not None:
                ids.append(int(self.tokenizer.eos_token_id))
        logprobs = c.logprobs if c.logprobs is not None and len(c.logprobs) == len(ids) else None
        c.token_ids, c.logprobs = list(ids), logprobs
        c.extra["prompt_ids"] = prompt
        return c

    def sample(self, conversations: list[Messages], sampling: SamplingParams) -> list[Completion]:
        with ThreadPoolExecutor(max_workers=self.concurrency) as pool:
            return list(pool.map(lambda m: self._one(m, sampling), conversations))


@dataclass(slots=True)
class TurnSample:
    traj: int  # row of the trajectory in the batch
    turn: int
    prompt_ids: list[int]
    response_ids: list[int]
    rollout_logprobs: list[float] | None


@dataclass(slots=True)
class RolloutBatch:
    """Trajectories (agent records) of len(problems) x n episodes, and their turns as token samples."""

    problems: list[Problem]
    group_ids: list[int]  # per trajectory: which prompt (index into `problems`)
    trajectories: list[Trajectory]
    samples: list[TurnSample] = field(default_factory=list)
    generate_s: float = 0.0
    judge_s: float = 0.0

    def results(self) -> list[list[EvalResult]]:
        return [[t.result for t in traj.turns] for traj in self.trajectories]

    def aborted(self) -> list[bool]:
        return [traj.error is not None for traj in self.trajectories]

    @staticmethod
    def concat(batches: Sequence[RolloutBatch]) -> RolloutBatch:
        out = RolloutBatch(problems=[], group_ids=[], trajectories=[])
        for b in batches:
            g0, r0 = len(out.problems), len(out.trajectories)
            out.problems.extend(b.problems)
            out.group_ids.extend(g + g0 for g in b.group_ids)
            out.trajectories.extend(b.trajectories)
            out.samples.extend(
                TurnSample(s.traj + r0, s.turn, s.prompt_ids, s.response_ids, s.rollout_logprobs)
                for s in b.samples
            )
            out.generate_s += b.generate_s
            out.judge_s += b.judge_s
        return out


def _step_all(
    envs: list[KernelEnv], active: list[int], completions: list[Completion], concurrency: int,
    on_done: Callable[[int], None] | None = None,
) -> list[str | None]:
    """Judge one turn of every active episode concurrently; an error string per failed episode."""

    def one(pair: tuple[int, Completion]) -> str | None:
        i, completion = pair
        try:
            envs[i].step(completion)
        except DrKernelError as exc:
            return f"{type(exc).__name__}: {exc}"
        finally:
            if on_done is not None:
                on_done(1)
        return None

    with ThreadPoolExecutor(max_workers=max(1, min(concurrency, len(active)))) as pool:
        return list(pool.map(one, zip(active, completions, strict=True)))


def collect_rollouts(
    problems: Sequence[Problem],
    sampler: Sampler,
    executor: Executor,
    *,
    n: int,
    env_config: EnvConfig,
    sampling: SamplingParams,
    concurrency: int = 32,
    on_turn: Callable[[int, int], None] | None = None,
    progress: Progress | None = None,
    episode: str | None = None,
) -> RolloutBatch:
    """Run n episodes per problem to their end (max_turns unless an episode fails).

    `progress` shows each turn's generation and judging (with the time left) as they happen.
    `episode` goes into every judge task id (`problem#episode.sample/tN`): a trainer gives each round of
    each step its own, so that a judge server (which refuses a task id it holds with another body) never
    sees one twice.
    """
    envs = [
        KernelEnv(p, executor, env_config, sample=s, count_tokens=sampler.count_tokens, episode=episode)
        for p in problems
        for s in range(n)
    ]
    batch = RolloutBatch(
        problems=list(problems),
        group_ids=[g for g in range(len(problems)) for _ in range(n)],
        trajectories=[],
    )
    for env in envs:
        env.reset()
    batch.trajectories = [env.trajectory for env in envs]  # type: ignore[misc]
    failed: set[int] = set()
    for turn in range(env_config.max_turns):
        active = [i for i, e in enumerate(envs) if not e.done and i not in failed]
        if not active:
            break
        t0 = time.perf_counter()
        if progress is not None:
            progress.line(f"  turn {turn + 1}/{env_config.max_turns}: "
                          f"generating {counted(len(active), 'response')}")
        try:
            completions = sampler.sample([envs[i].observation for i in active], sampling)
        except PolicyError as exc:
            for i in active:
                batch.trajectories[i].error = f"PolicyError: {exc}"
            log.warning("rollout generation failed at turn %d: %s", turn, exc)
            break
        t1 = time.perf_counter()
        if progress is not None:
            progress.line(
                f"  turn {turn + 1}/{env_config.max_turns}: generated in {format_duration(t1 - t0)}"
            )
            with progress.bar(
                f"  turn {turn + 1}/{env_config.max_turns}: judging", len(active), "kernels"
            ) as bar:
                errors = _step_all(envs, active, completions, concurrency, bar.update)
        else:
            errors = _step_all(envs, active, completions, concurrency)
        batch.generate_s += t1 - t0
        batch.judge_s += time.perf_counter() - t1
        for i, c, err in zip(active, completions, errors, strict=True):
            if err is not None:
                failed.add(i)
                batch.trajectories[i].error = err
                continue
            batch.samples.append(
                TurnSample(i, turn, list(c.extra["prompt_ids"]), list(c.token_ids or []), c.logprobs)
            )
        if on_turn is not None:
            on_turn(turn, len(active))
    return batch
