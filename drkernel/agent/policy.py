"""The policy seam: chat messages in, n sampled completions out (with token log-probs if known).

Backends: openai_policy.OpenAIPolicy (vLLM, SGLang, API providers), hf_policy.HFPolicy (local
transformers), ScriptedPolicy (tests and replays). Failures of a backend raise PolicyError.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from drkernel.errors import ConfigError, PolicyError

__all__ = [
    "Completion",
    "Policy",
    "SamplingParams",
    "ScriptedPolicy",
    "count_tokens_estimate",
    "token_counter",
]

Messages = list[dict[str, str]]


@dataclass(frozen=True, slots=True, kw_only=True)
class SamplingParams:
    temperature: float = 1.0  # docs/paper_spec.md §11: eval scripts use 1.0 / 0.95
    top_p: float = 0.95
    max_tokens: int = 8192  # docs/paper_spec.md §11: max generated tokens per turn
    stop: tuple[str, ...] = ()
    seed: int | None = None
    logprobs: bool = True  # ask for per-token log-probs (MRS needs them, docs/paper_spec.md §2.7)

    def __post_init__(self) -> None:
        if not (math.isfinite(self.temperature) and self.temperature >= 0):  # NaN too
            raise ConfigError("sampling.temperature: must be a number >= 0")
        if not 0 < self.top_p <= 1:
            raise ConfigError("sampling.top_p: must be in (0, 1]")
        if self.max_tokens < 1:
            raise ConfigError("sampling.max_tokens: must be >= 1")


@dataclass(slots=True)
class Completion:
    text: str
    finish_reason: str | None = None  # "stop" | "length" | ...
    tokens: list[str] | None = None
    token_ids: list[int] | None = None
    logprobs: list[float] | None = None  # one per generated token, under the sampling model
    reasoning: str | None = None  # separate reasoning channel, when the server gives one
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "finish_reason": self.finish_reason,
            "tokens": self.tokens,
            "token_ids": self.token_ids,
            "logprobs": self.logprobs,
            "reasoning": self.reasoning,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
        }


@runtime_checkable
class Policy(Protocol):
    def generate(
        self, messages: Messages, n: int = 1, sampling: SamplingParams | None = None
    ) -> list[Completion]:
        """Sample `n` assistant replies to the conversation `messages`."""
        ...


def count_tokens_estimate(text: str) -> int:
    """Token count when no tokenizer is known: about 4 characters per token.

    >>> count_tokens_estimate("abcdefgh")
    2
    """
    return (len(text) + 3) // 4


def token_counter(policy: object) -> Callable[[str], int]:
    """The policy's own token counter (`count_tokens`) when it has one, else the char/4 estimate."""
    fn = getattr(policy, "count_tokens", None)
    if callable(fn):
        return fn  # type: ignore[no-any-return]
    return count_tokens_estimate


Script = Sequence[str] | Callable[[Messages, int], str]


class ScriptedPolicy:
    """Replays answers: a list (cycled, in call order) or a function of (messages, call index).

    Thread-safe; `calls` records every conversation it was asked about, `samplings` the sampling
    parameters of each.
    """

    def __init__(self, script: Script, *, fail_first: int = 0) -> None:
        if not callable(script) and not list(script):
            raise ConfigError("ScriptedPolicy: empty script")
        self._script = script
        self._count = 0
        self._fail_first = fail_first  # raise PolicyError on the first k calls (retry tests)
        self._lock = threading.Lock()
        self.calls: list[Messages] = []
        self.samplings: list[SamplingParams | None] = []

    def generate(
        self, messages: Messages, n: int = 1, sampling: SamplingParams | None = None
    ) -> list[Completion]:
        out = []
        for _ in range(n):
            with self._lock:
                index = self._count
                self._count += 1
                self.calls.append([dict(m) for m in messages])
                self.samplings.append(sampling)
                if index < self._fail_first:
                    raise PolicyError(f"scripted failure on call {index}")
            index -= self._fail_first
            if callable(self._script):
                text = self._script(messages, index)
            else:
                answers = list(self._script)
                text = answers[index % len(answers)]
            out.append(Completion(text=text, finish_reason="stop"))
        return out
