"""Context management for sequential test-time scaling (docs/paper_spec.md §10).

Every turn stays in external memory (the episode's turn list); each prompt is the task plus a
selection of earlier turns: all of them ("full"), the top-w by reward ("top_w", the paper) or the
best contiguous window of w by summed reward ("best_window", the authors' code), kept in
chronological order, and cut to a token budget however many turns have run.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass

from drkernel.agent.policy import count_tokens_estimate
from drkernel.agent.trajectories import Turn
from drkernel.errors import ConfigError

__all__ = ["ContextConfig", "ContextManager", "select_turns"]

log = logging.getLogger(__name__)

_MODES = ("full", "top_w", "best_window")
_PER_MESSAGE_TOKENS = 8  # chat-template overhead per message (role markers, separators)


@dataclass(frozen=True, slots=True, kw_only=True)
class ContextConfig:
    mode: str = "full"  # training keeps the full history (docs/paper_spec.md §2.3)
    w: int = 4  # docs/paper_spec.md §10: keep the best 4 turns
    token_budget: int | None = None  # max prompt tokens; None: unbounded (mode-bounded only)
    rank_by: str = "reward"  # "reward" | "speedup"
    keep_last: bool = False  # also always show the latest turn (not in the paper)
    # a prompt over token_budget: "shrink" it (ours: answers cut to code, weakest turns dropped), or
    # send nothing, record an empty "prompt overlong" turn and end the episode (the authors,
    # docs/paper_spec.md §2.7)
    overflow: str = "shrink"
    # the model's context, prompt + answer (the authors' max_model_len: their eval's 20,480 + 8,192).
    # Set, a turn's answer gets at most max_model_len - prompt tokens, and with overflow="overlong" a
    # prompt is not sent only when it leaves less than 2 tokens of it (their engine's rule: prompt >=
    # max_model_len - 1), whatever token_budget says. None: overlong means over token_budget.
    max_model_len: int | None = None
    # equal scores: the more recent turns ("latest", ours) or the earlier ("earliest": the authors'
    # best_window, which keeps the first window of the highest sum, docs/paper_spec.md §10)
    ties: str = "latest"

    def __post_init__(self) -> None:
        if self.mode not in _MODES:
            raise ConfigError(f"context.mode: must be one of {', '.join(_MODES)}")
        if self.w < 1:
            raise ConfigError("context.w: must be >= 1")
        if self.token_budget is not None and self.token_budget < 64:
            raise ConfigError("context.token_budget: must be >= 64 tokens")
        if self.rank_by not in ("reward", "speedup"):
            raise ConfigError("context.rank_by: must be 'reward' or 'speedup'")
        if self.overflow not in ("shrink", "overlong"):
            raise ConfigError("context.overflow: must be 'shrink' or 'overlong'")
        if self.ties not in ("latest", "earliest"):
            raise ConfigError("context.ties: must be 'latest' or 'earliest'")
        if self.max_model_len is not None and self.max_model_len < 64:
            raise ConfigError("context.max_model_len: must be >= 64 tokens")
        if (self.overflow == "shrink" and self.max_model_len is not None and self.token_budget is not None
                and self.token_budget >= self.max_model_len):  # a prompt shrunk to the budget left the
            # answer max_tokens 1: each such turn was sent, wasted, and scored no code
            raise ConfigError(f"context.token_budget: {self.token_budget} prompt tokens leave no room for an "
                              f"answer within a context of {self.max_model_len} (--max-model-len): give a "
                              "smaller --prompt-budget (--tts sets 20480 unless told)")

    @classmethod
    def paper_stts(cls, token_budget: int | None = 20480) -> ContextConfig:
        """Top-4 by reward; budget = the authors' eval max prompt length (docs/paper_spec.md §11)."""
        return cls(mode="top_w", w=4, token_budget=token_budget)


def _score(turn: Turn, rank_by: str) -> float:
    """The turn's rank; a NaN or infinite one (a record read back from JSON) is 0, as not measured: NaN
    in the sort keys would leave the order to chance."""
    score = (turn.result.speedup or 0.0) if turn.correct else 0.0
    if rank_by != "speedup":
        score = turn.reward
    return score if math.isfinite(score) else 0.0


def select_turns(turns: list[Turn], config: ContextConfig) -> list[int]:
    """Indices of the turns to show, oldest first. Ties go to the more recent turns, or with
    `ties="earliest"` to the earlier ones.

    >>> from drkernel.types import EvalOutcome, EvalResult
    >>> mk = lambda i, r: Turn(i, "", None, "none", EvalResult(EvalOutcome.OK), r, "")
    >>> ts = [mk(i, r) for i, r in enumerate([1, 0, 3, 2, 0, 1])]
    >>> select_turns(ts, ContextConfig(mode="top_w", w=3))
    [2, 3, 5]
    >>> select_turns(ts, ContextConfig(mode="best_window", w=3))
    [2, 3, 4]
    >>> select_turns(ts, ContextConfig(mode="best_window", w=3, ties="earliest"))
    [1, 2, 3]
    """
    n = len(turns)
    if config.mode == "full" or n <= config.w:
        return list(range(n))
    scores = [_score(t, config.rank_by) for t in turns]
    late = 1 if config.ties == "latest" else -1  # the tie-break: prefer larger or smaller indices
    if config.mode == "top_w":
        ranked = sorted(range(n), key=lambda i: (scores[i], late * i), reverse=True)
        chosen = set(ranked[: config.w])
    else:
        starts = range(n - config.w + 1)
        best = max(starts, key=lambda s: (sum(scores[s : s + config.w]), late * s))
        chosen = set(range(best, best + config.w))
    if config.keep_last and n - 1 not in chosen:
        chosen.discard(min(chosen, key=lambda i: (scores[i], i)))
        chosen.add(n - 1)
    return sorted(chosen)


def _compact(turn: Turn) -> str:
    """An assistant message reduced to its code (the reasoning is what the budget drops first)."""
    if turn.code is None:
        return "(this answer contained no code)"
    return f"```python\n{turn.code.strip()}\n```"


class ContextManager:
    """Builds each turn's prompt messages from the task and the turns so far."""

    def __init__(
        self, config: ContextConfig | None = None, count_tokens: Callable[[str], int] | None = None
    ) -> None:
        self.config = config or ContextConfig()
        self.count_tokens = count_tokens or count_tokens_estimate

    def overlong(self, size: int) -> bool:
        """Whether a prompt of `size` tokens is not sent (overflow="overlong"): it leaves less than 2
        tokens of max_model_len for the answer, or without max_model_len, it is over the budget.

        >>> cm = ContextManager(ContextConfig(overflow="overlong", token_budget=20480, max_model_len=28672))
        >>> cm.overlong(28670), cm.overlong(28671), cm.room(28000)
        (False, True, 672)
        """
        cfg = self.config
        if cfg.overflow != "overlong":
            return False
        if cfg.max_model_len is not None:
            return size >= cfg.max_model_len - 1
        return cfg.token_budget is not None and size > cfg.token_budget

    def room(self, size: int) -> int | None:
        """Tokens of the model's context left for the answer to a prompt of `size` tokens (None:
        unbounded, no max_model_len)."""
        return None if self.config.max_model_len is None else max(self.config.max_model_len - size, 1)

    def measure(self, messages: list[dict[str, str]]) -> int:
        return sum(self.count_tokens(m["content"]) + _PER_MESSAGE_TOKENS for m in messages)

    def build(
        self, prompt: list[dict[str, str]], turns: list[Turn]
    ) -> tuple[list[dict[str, str]], list[int] | None, int]:
        """(messages, indices of the turns shown or None for all, prompt tokens)."""
        selected = select_turns(turns, self.config)
        compact: set[int] = set()
        messages = self._render(prompt, turns, selected, compact)
        size = self.measure(messages)
        budget = self.config.token_budget
        if budget is not None and size > budget and self.config.overflow == "shrink":
            messages, selected, size = self._shrink(prompt, turns, selected, budget)
        full = self.config.mode == "full" and selected == list(range(len(turns)))
        return messages, (None if full else selected), size

    def _render(
        self,
        prompt: list[dict[str, str]],
        turns: list[Turn],
        selected: list[int],
        compact: set[int],
    ) -> list[dict[str, str]]:
        out = [dict(m) for m in prompt]
        for i in selected:
            text = _compact(turns[i]) if i in compact else turns[i].response
            out.append({"role": "assistant", "content": text})
            out.append({"role": "user", "content": turns[i].feedback})
        return out

    def _shrink(
        self, prompt: list[dict[str, str]], turns: list[Turn], selected: list[int], budget: int
    ) -> tuple[list[dict[str, str]], list[int], int]:
        """Compact answers to code, then drop the weakest turns, then cut the last one left."""
        kept = list(selected)
        compact = set(kept)
        while True:
            messages = self._render(prompt, turns, kept, compact)
            size = self.measure(messages)
            if size <= budget or not kept:
                break
            if len(kept) == 1:
                for _ in range(6):  # the char/token ratio is only estimated: cut until it fits
                    messages = self._cut_last(messages, size - budget)
                    size = self.measure(messages)
                    if size <= budget:
                        break
                if size <= budget:
                    break
                kept = []  # even a cut turn does not fit: the task alone
                continue
            weakest = min(kept, key=lambda i: (_score(turns[i], self.config.rank_by), i))
            kept.remove(weakest)
        if size > budget:
            log.warning("prompt of %d tokens exceeds the budget %d on its own", size, budget)
        return messages, kept, size

    def _cut_last(self, messages: list[dict[str, str]], excess: int) -> list[dict[str, str]]:
        """Trim the last assistant/feedback pair by about `excess` tokens (plus a margin)."""
        out = [dict(m) for m in messages]
        chars = 4 * excess + 64  # char/4 is conservative for code and prose tokenizers
        for idx in (-1, -2):  # feedback first, then the answer
            text = out[idx]["content"]
            cut = min(chars, max(len(text) - 40, 0))
            if cut <= 0:
                continue
            keep = len(text) - cut
            out[idx]["content"] = text[: keep // 2] + "\n[... cut ...]\n" + text[len(text) - keep // 2 :]
            chars -= cut
            if chars <= 0:
                break
        return out
