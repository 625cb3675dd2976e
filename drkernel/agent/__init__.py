"""The agent: how a model meets the judge (prompts, extraction, feedback, episodes, STTS, bench).

Problem -> prompt -> Policy -> response -> submission -> Executor -> EvalResult -> feedback -> ...
Backends that need optional packages (httpx, transformers) are imported from their own modules.
"""

from drkernel.agent.env import EnvConfig, KernelEnv, StepResult
from drkernel.agent.extraction import Extraction, extract_code, preflight_result
from drkernel.agent.feedback import FeedbackConfig, render_feedback
from drkernel.agent.loop import LoopConfig, run_episode, run_episodes
from drkernel.agent.metrics import FAST_P, fast_p, summarize
from drkernel.agent.policy import Completion, Policy, SamplingParams, ScriptedPolicy
from drkernel.agent.prompts import PromptConfig, first_turn_prompt, later_turn_prompt
from drkernel.agent.trajectories import Trajectory, Turn, load_trajectories, save_trajectories
from drkernel.agent.tts import ContextConfig, ContextManager, select_turns

__all__ = [
    "FAST_P",
    "Completion",
    "ContextConfig",
    "ContextManager",
    "EnvConfig",
    "Extraction",
    "FeedbackConfig",
    "KernelEnv",
    "LoopConfig",
    "Policy",
    "PromptConfig",
    "SamplingParams",
    "ScriptedPolicy",
    "StepResult",
    "Trajectory",
    "Turn",
    "extract_code",
    "fast_p",
    "first_turn_prompt",
    "later_turn_prompt",
    "load_trajectories",
    "preflight_result",
    "render_feedback",
    "run_episode",
    "run_episodes",
    "save_trajectories",
    "select_turns",
    "summarize",
]
