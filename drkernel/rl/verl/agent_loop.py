"""verl agent loop "drkernel_kernel": one multi-turn kernel episode -> one AgentLoopOutput per turn.

The episode is rl/rollout.py's: KernelEnv renders the prompt, verl's server manager generates, the env
extracts the code, judges it (HttpExecutor against `drkernel serve`, or any drkernel judge) and
renders the feedback; repeat for rollout.max_turns. The token history is extended with verl's
Continuous Token builder, never re-tokenised, so the trainer scores exactly the sampled tokens (MRS's
[0.999, 1.001] bounds need that). A prompt longer than rollout.prompt_length is an empty turn with
reward 0 (docs/paper_spec.md §2.7): one masked pad token, since verl's rows need a response token.

Each output carries its turn's reward and the (prompt, trajectory, turn) key in `extra_fields`
(`drkernel_*`), because verl's post-processing overwrites `reward_score` and `uid` per trajectory;
drkernel.rl.verl.trainer restores them. Needs the `drkernel:` config block (settings.run_config).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any
from uuid import uuid4

from verl.experimental.agent_loop.agent_loop import (
    AgentLoopBase,
    AgentLoopMetrics,
    AgentLoopOutput,
    register,
)

from drkernel.agent.env import EnvConfig, KernelEnv
from drkernel.agent.feedback import FeedbackConfig
from drkernel.agent.policy import Completion
from drkernel.errors import ConfigError, DrKernelError
from drkernel.rl.rewards import turn_rewards
from drkernel.rl.verl.settings import run_config, shared_executor
from drkernel.types import Problem

__all__ = ["AGENT_NAME", "KernelAgentLoop", "problem_from_row"]

log = logging.getLogger(__name__)

AGENT_NAME = "drkernel_kernel"


def problem_from_row(kwargs: dict[str, Any]) -> Problem:
    """The Problem of a dataset row: extra_info.problem = {name, reference_code, entry_point, level}."""
    info = kwargs.get("extra_info") or {}
    spec = info.get("problem") if isinstance(info, dict) else None
    if not isinstance(spec, dict) or "reference_code" not in spec or "name" not in spec:
        raise ConfigError(
            "drkernel_kernel agent loop: each dataset row needs extra_info.problem with name and "
            "reference_code (recipes/verl/README.md shows the parquet layout)"
        )
    return Problem(
        name=str(spec["name"]),
        reference_code=str(spec["reference_code"]),
        entry_point=str(spec.get("entry_point") or "Model"),
        level=int(spec["level"]) if spec.get("level") is not None else None,
    )


class _Versions:
    """The weight versions (min_global_steps, max_global_steps) a trajectory was sampled with so far.

    verl's server client reports them per generation; without one (every turn so far prompt-overlong)
    they are the weights a sync step samples with: the dataloader step minus one.
    """

    def __init__(self, global_steps: Any) -> None:
        step = int(global_steps) - 1 if global_steps is not None else 0
        self.min: int | None = None
        self.max: int | None = None
        self.fallback = max(step, 0)

    def update(self, server_fields: dict[str, Any]) -> None:
        lo = server_fields.get("min_global_steps", server_fields.get("global_steps"))
        hi = server_fields.get("max_global_steps", server_fields.get("global_steps"))
        if lo is not None and self.min is None:
            self.min = int(lo)
        if hi is not None:
            self.max = int(hi) if self.max is None else max(self.max, int(hi))

    def fields(self) -> dict[str, int]:
        lo = self.min if self.min is not None else self.fallback
        hi = self.max if self.max is not None else lo
        return {"min_global_steps": lo, "max_global_steps": max(hi, lo)}


@register(AGENT_NAME)
class KernelAgentLoop(AgentLoopBase):
    """The kernel episode as a verl agent loop (see the module doc)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.pop("tools", None)
        super().__init__(*args, **kwargs)
        self.run_cfg = run_config(self.config)
        self.prompt_length = int(self.rollout_config.prompt_length)
        self.response_length = int(self.rollout_config.response_length)
        ro = self.run_cfg.rollout
        self.env_config = EnvConfig(
            max_turns=ro.max_turns,
            eval_options=self.run_cfg.eval_options(),
            reward=self.run_cfg.reward,
            feedback=FeedbackConfig(max_chars=ro.feedback_chars),
        )

    @property
    def _tok(self) -> Any:
        """verl types its tokenizer as AutoTokenizer (a factory); the object is a PreTrainedTokenizer."""
        return self.tokenizer

    def _count_tokens(self, text: str) -> int:
        return len(self._tok.encode(text, add_special_tokens=False))

    def _pad_id(self) -> int:
        tok = self._tok
        pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        return int(pad if pad is not None else 0)

    async def _generate(
        self, prompt_ids: list[int], sampling_params: dict[str, Any]
    ) -> tuple[list[int], list[float] | None, dict[str, Any]]:
        out = await self.server_manager.generate(
            request_id=uuid4().hex, prompt_ids=prompt_ids, sampling_params=sampling_params
        )
        ids = [int(x) for x in out.token_ids][: self.response_length]
        logprobs = [float(x) for x in out.log_probs][: len(ids)] if out.log_probs else None
        return ids, logprobs, dict(getattr(out, "extra_fields", None) or {})

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> list[AgentLoopOutput]:  # type: ignore[override]
        problem = problem_from_row(kwargs)
        session = int(kwargs.get("session_id", 0))
        uid = str(kwargs.get("uid", problem.name))
        # verl's uid is fresh for each prompt of each step: the judge's task ids never repeat across steps
        env = KernelEnv(problem, shared_executor(self.run_cfg), self.env_config, sample=session, episode=uid,
                        count_tokens=self._count_tokens)
        env.reset()
        messages = [dict(m) for m in env.observation]
        builder = self.continuous_token_builder
        runtime = await asyncio.to_thread(builder.build_initial_tokens, messages)
        turns: list[dict[str, Any]] = []
        error: str | None = None
        # verl's staleness tags and metrics read min/max_global_steps from every row (the weight versions
        # the trajectory was sampled with so far); a turn with no generation carries the last known ones
        versions = _Versions(kwargs.get("global_steps"))
        for turn in range(self.env_config.max_turns):
            prompt_ids = list(runtime)
            if len(prompt_ids) > self.prompt_length:  # docs/paper_spec.md §2.7: an empty turn, reward 0
                ids: list[int] = []
                logprobs = None
                server_fields: dict[str, Any] = {}
                completion = Completion(text="", finish_reason="prompt_overlong", token_ids=[], logprobs=[])
            else:
                ids, logprobs, server_fields = await self._generate(prompt_ids, sampling_params)
                versions.update(server_fields)
                text = self._tok.decode(ids, skip_special_tokens=True)
                finish = "length" if len(ids) >= self.response_length else "stop"
                completion = Completion(text=text, finish_reason=finish, token_ids=ids, logprobs=logprobs)
            try:
                await asyncio.to_thread(env.step, completion)
            except DrKernelError as exc:  # the judge failed for good: the trajectory is aborted
                error = f"{type(exc).__name__}: {exc}"
                log.warning(
                    "drkernel episode %s#%d aborted at turn %d: %s", problem.name, session, turn, error
                )
                break
            turns.append({"prompt_ids": prompt_ids, "ids": ids, "logprobs": logprobs,
                          "server": {**server_fields, **versions.fields()}})
            if env.done:
                break
            new_messages = [dict(m) for m in env.observation]
            answer = {"role": "assistant", "content": completion.text}
            if new_messages[: len(messages) + 1] != [*messages, answer]:
                raise ConfigError(
                    "drkernel_kernel agent loop: the next prompt does not extend the conversation; "
                    "training needs the full context (agent context.mode=full, no token budget)"
                )
            if ids:
                merged = builder.merge_assistant_tokens(runtime, ids)
                merged = builder.merge_context_tokens([*messages, answer], new_messages, merged.token_ids)
                runtime = merged.token_ids
            else:  # nothing was sampled, so nothing can be re-tokenised: render the conversation anew
                runtime = await asyncio.to_thread(builder.build_initial_tokens, new_messages)
            messages = new_messages
        return self._outputs(uid, session, env, turns, error)

    def _outputs(
        self, uid: str, session: int, env: KernelEnv, turns: list[dict[str, Any]], error: str | None
    ) -> list[AgentLoopOutput]:
        traj = env.trajectory
        assert traj is not None
        if error is not None:
            traj.error = error
        max_turns = self.env_config.max_turns
        tr = turn_rewards(
            [[t.result for t in traj.turns]], self.run_cfg.reward, max_turns=max_turns
        )
        n = len(turns)
        last_reward = float(tr.rewards[0, n - 1]) if n else 0.0
        outputs = []
        for k, t in enumerate(turns):
            ids, logprobs = t["ids"], t["logprobs"]
            empty = not ids
            prompt_ids = t["prompt_ids"][-self.prompt_length :] if empty else t["prompt_ids"]
            response = ids if ids else [self._pad_id()]
            mask = [1] * len(ids) if ids else [0]
            lp = logprobs if logprobs is not None and len(logprobs) == len(ids) and ids else None
            if lp is None and self.rollout_config.calculate_log_probs:
                lp = [0.0] * len(response)  # a masked pad or a server without log-probs: MRS sees no token
            speed, cov = float(tr.speedup[0, k]), float(tr.coverage[0, k])
            extra = {
                **t["server"],
                "drkernel_prompt": uid,
                "drkernel_trajectory": session,
                "drkernel_turn": k,
                "drkernel_reward": float(tr.rewards[0, k]),
                "drkernel_correct": bool(tr.correct[0, k]),
                "drkernel_speedup": speed,
                "drkernel_coverage": cov,
                "drkernel_aborted": error is not None,
                "drkernel_empty": empty,
                "drkernel_rollout_logprobs": logprobs is not None and not empty,
                "drkernel_hacked": bool(traj.turns[k].result.hacks),
                "turn_scores": [],
                "tool_rewards": [],
                "reward_extra_info": {"drkernel_last_reward": last_reward},
            }
            outputs.append(
                AgentLoopOutput(
                    prompt_ids=list(prompt_ids),
                    response_ids=list(response),
                    response_mask=mask,
                    response_logprobs=lp,
                    reward_score=float(tr.rewards[0, k]),
                    num_turns=2 * (k + 1),
                    metrics=AgentLoopMetrics(),
                    extra_fields=extra,
                )
            )
        if not outputs:
            log.warning("drkernel episode %s#%d produced no turn (%s)", traj.problem, session, error)
        return outputs
