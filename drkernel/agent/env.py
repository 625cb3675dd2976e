"""KernelEnv: one problem as a Gymnasium-style multi-turn environment around an Executor.

reset() -> (prompt messages, info); step(response) -> StepResult(obs, reward, terminated,
truncated, info). The response is extracted, judged (or failed as "no_code" without the judge),
rendered as feedback, and the next prompt is built by the context manager (tts.py).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from drkernel.agent.extraction import extract_code, overlong_result, preflight_result
from drkernel.agent.feedback import FeedbackConfig, render_feedback
from drkernel.agent.policy import Completion
from drkernel.agent.prompts import PromptConfig, data_prompt, first_turn_prompt, later_turn_prompt
from drkernel.agent.trajectories import Trajectory, Turn, plain_prompt, prompt_edits
from drkernel.agent.tts import ContextConfig, ContextManager
from drkernel.errors import ConfigError, ExecutorError
from drkernel.executors.base import Executor
from drkernel.reward.speedup import RewardConfig, result_reward, reward_config
from drkernel.types import EvalOptions, EvalOutcome, EvalRequest, EvalResult, Problem

__all__ = ["EnvConfig", "KernelEnv", "StepResult"]


Messages = list[dict[str, str]]


@dataclass(frozen=True, slots=True, kw_only=True)
class EnvConfig:
    max_turns: int = 3  # docs/paper_spec.md §2.7, §11
    eval_options: EvalOptions = field(default_factory=EvalOptions)
    # the turn reward; None: the one eval_options ask for (drkernel.reward.reward_config: bench and
    # optimize). A training run passes its own (RunConfig.reward): it then replaces the `reward` the judge
    # reports under eval_options' reward fields
    reward: RewardConfig | None = None
    prompts: PromptConfig = field(default_factory=PromptConfig)
    feedback: FeedbackConfig = field(default_factory=FeedbackConfig)
    context: ContextConfig = field(default_factory=ContextConfig)
    # None: always run to max_turns, as the authors do (docs/paper_spec.md §2.7); else stop once a
    # correct kernel reaches this speedup (terminated=True).
    stop_at_speedup: float | None = None
    # check every judged kernel on the problem's held-out shapes (Problem.shape_variants). The model
    # never sees them, nor their results. Failing one changes no reward; a hack seen while running
    # them is a hack like any other (hack_detected, reward 0), named in the feedback by its class only.
    held_out: bool = False
    # "median": the judge's speedup (median over the timed calls, ours); "mean": reference mean /
    # kernel mean and the reward recomputed from it, as the authors time (docs/paper_spec.md §3.2)
    speedup_from: str = "median"
    # no retries here: the executor is the one retry layer (its pool retries a dead or faulty judge,
    # its HTTP client a dropped connection); an infra_error result that is left ends the episode

    def __post_init__(self) -> None:
        if self.max_turns < 1:
            raise ConfigError("env.max_turns: must be >= 1")
        if self.speedup_from not in ("median", "mean"):
            raise ConfigError("env.speedup_from: must be 'median' or 'mean'")


class StepResult(NamedTuple):
    obs: Messages  # the next prompt (empty once the episode is over)
    reward: float
    terminated: bool  # a goal state was reached (stop_at_speedup)
    truncated: bool  # the turn budget ran out, or the prompt did not fit the model's context
    info: dict[str, Any]


class KernelEnv:
    def __init__(
        self,
        problem: Problem,
        executor: Executor,
        config: EnvConfig | None = None,
        *,
        sample: int = 0,
        episode: str | None = None,
        model: str | None = None,
        count_tokens: Callable[[str], int] | None = None,
    ) -> None:
        self.problem = problem
        self.executor = executor
        self.config = config or EnvConfig()
        self.sample = sample
        # task ids are `problem#sample/tN`, or `problem#episode.sample/tN` when one judge server sees
        # the same problem and sample again (verl's later steps: a reused task id naming another kernel
        # is refused by `drkernel serve` with HTTP 409)
        self.episode = episode
        self.model = model
        self._templates = self.config.prompts.build()
        self._context = ContextManager(self.config.context, count_tokens)
        self._reward = self.config.reward or reward_config(self.config.eval_options)
        self.trajectory: Trajectory | None = None
        self._obs: Messages = []
        self._obs_context: list[int] | None = None
        self._obs_edits: list[tuple[int, str]] | None = None
        self._obs_tokens = 0
        self._done = False

    # -- Gymnasium-style API -------------------------------------------------------------------
    def reset(self) -> tuple[Messages, dict[str, Any]]:
        prompt: Messages = []
        own = data_prompt(self.problem) if self._templates.first_turn_from_data else None
        if own:  # the problem's own first messages (the authors' parquet prompt), as they are
            prompt.extend(own)
        else:
            if self._templates.system_prompt:
                prompt.append({"role": "system", "content": self._templates.system_prompt})
            prompt.append({"role": "user", "content": first_turn_prompt(self.problem, self._templates)})
        self.trajectory = Trajectory(
            problem=self.problem.name,
            sample=self.sample,
            prompt=prompt,
            model=self.model,
            level=self.problem.level,
        )
        self._done = False
        self._build_obs()
        return self._obs, {"prompt_tokens": self._obs_tokens}

    def step(self, response: str | Completion) -> StepResult:
        traj = self.trajectory
        if traj is None or self._done:
            raise RuntimeError("KernelEnv.step: call reset() first (the episode is over)")
        completion = response if isinstance(response, Completion) else Completion(text=response)
        turn = self._judge_turn(len(traj.turns), completion)
        traj.turns.append(turn)
        correct_fast = (
            self.config.stop_at_speedup is not None
            and turn.correct
            and (turn.result.speedup or 0.0) >= self.config.stop_at_speedup
        )
        # an over-long prompt ends the episode, as the authors' engine does (docs/paper_spec.md §2.7): the
        # next prompt would hold this one and more
        overlong = completion.finish_reason == "prompt_overlong"
        if overlong:
            traj.metadata["stopped"] = "prompt_overlong"
        truncated = not correct_fast and (overlong or len(traj.turns) >= self.config.max_turns)
        self._done = correct_fast or truncated
        traj.terminated, traj.truncated = correct_fast, truncated
        if self._done:
            self._obs = []
        else:
            self._build_obs()
        info = {"turn": turn, "result": turn.result, "prompt_tokens": self._obs_tokens}
        return StepResult(self._obs, turn.reward, correct_fast, truncated, info)

    @property
    def observation(self) -> Messages:
        return self._obs

    @property
    def done(self) -> bool:
        return self._done

    @property
    def prompt_overlong(self) -> bool:
        """The next prompt must not be sent (context.overflow="overlong"; tts.ContextManager.overlong):
        the turn is played as an empty "prompt_overlong" completion with reward 0, and the episode ends."""
        return not self._done and self._context.overlong(self._obs_tokens)

    @property
    def answer_room(self) -> int | None:
        """Tokens of the model's context left for the next answer (context.max_model_len less the
        prompt's tokens), or None when the context is not bounded."""
        return self._context.room(self._obs_tokens)

    # -- internals ---------------------------------------------------------------------------
    def _build_obs(self) -> None:
        assert self.trajectory is not None
        traj = self.trajectory
        self._obs, self._obs_context, self._obs_tokens = self._context.build(traj.prompt, traj.turns)
        shown = range(len(traj.turns)) if self._obs_context is None else self._obs_context
        self._obs_edits = prompt_edits(plain_prompt(traj.prompt, traj.turns, shown), self._obs)

    def _judge_turn(self, index: int, completion: Completion) -> Turn:
        entry = self.problem.entry_point
        extraction = extract_code(completion.text, entry)
        t0 = time.perf_counter()
        if completion.finish_reason == "prompt_overlong":  # docs/paper_spec.md §2.7: an empty turn, reward 0
            result: EvalResult | None = overlong_result()
        else:
            result = preflight_result(extraction, entry)
        if result is None:
            assert extraction.code is not None
            result = self._evaluate(extraction.code, index)
            if self.config.speedup_from == "mean":
                result = _mean_speedup(result)
        result = _with_reward(result, self._reward)
        evaluate_s = time.perf_counter() - t0
        feedback = render_feedback(result, self.config.feedback)
        return Turn(
            index=index,
            response=completion.text,
            code=extraction.code,
            extraction=extraction.method,
            result=result,
            reward=result.reward,
            feedback=later_turn_prompt(feedback, entry, self._templates),
            context=self._obs_context,
            prompt_edits=self._obs_edits,
            prompt_tokens=self._obs_tokens,
            logprobs=completion.logprobs,
            tokens=completion.tokens,
            token_ids=completion.token_ids,
            finish_reason=completion.finish_reason,
            generate_s=completion.extra.get("generate_s"),
            evaluate_s=evaluate_s,
        )

    def _episode_id(self) -> str:
        return str(self.sample) if self.episode is None else f"{self.episode}.{self.sample}"

    def _evaluate(self, code: str, index: int) -> EvalResult:
        options = self.config.eval_options
        if options.entry_point != self.problem.entry_point:
            options = options.replace(entry_point=self.problem.entry_point)
        request = EvalRequest(
            reference_code=self.problem.reference_code,
            kernel_code=code,
            options=options,
            task_id=f"{self.problem.name}#{self._episode_id()}/t{index}",
            problem_name=self.problem.name,
            shape_variants=self.problem.shape_variants if self.config.held_out else (),
        )
        result = self.executor.evaluate([request])[0]
        if result.outcome is EvalOutcome.INFRA_ERROR:  # no verdict, after the executor's own retries: the
            # episode ends here (trajectory.error), so no turn is rewarded or trained for a fault of ours
            err = result.error
            raise ExecutorError(f"no verdict for {request.task_id}: "
                                f"{err.kind + ': ' + err.message if err else 'infra_error'}")
        return result


def _mean_speedup(result: EvalResult) -> EvalResult:
    """The result with the authors' speedup: their timing's where the judge took it (`paper_timing`,
    the quotient of the two rounded means), else reference mean / kernel mean over the judge's timed
    calls (its median-based figures stay in reference_timing/kernel_timing); _with_reward then
    rewards it."""
    if not result.correct or result.hacks:
        return result
    paper = result.paper_timing
    if paper is not None and paper.speedup is not None:
        return dataclasses.replace(result, speedup=paper.speedup)
    ref, ker = result.reference_timing, result.kernel_timing
    if ref is None or ker is None or ker.mean_ms <= 0:
        return result
    return dataclasses.replace(result, speedup=ref.mean_ms / ker.mean_ms)


def _with_reward(result: EvalResult, config: RewardConfig) -> EvalResult:
    """The result whose `reward` is the turn reward of its facts under the env's options
    (drkernel.reward.result_reward): what the agent, the feedback, STTS and the trainer all see."""
    reward = result_reward(result, config)
    return result if result.reward == reward else dataclasses.replace(result, reward=reward)
