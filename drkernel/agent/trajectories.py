"""Turns and trajectories of the agent, and their storage as JSONL (or parquet with pyarrow).

One record per episode in a chat format fit for SFT (`messages`: the first user prompt, then each
assistant answer and its feedback message) and for RL (`turns`: per-turn reward, EvalResult dict,
the context each turn saw, token log-probs when the policy gave them).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from drkernel.errors import ConfigError
from drkernel.types import EvalResult

__all__ = [
    "Trajectory",
    "Turn",
    "append_jsonl",
    "iter_jsonl",
    "load_trajectories",
    "plain_prompt",
    "prompt_edits",
    "rl_rows",
    "save_trajectories",
    "scan_jsonl",
    "turn_prompt",
]

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Turn:
    index: int  # 0-based
    response: str
    code: str | None  # the extracted submission; None when the response held no code
    extraction: str  # extraction method (extraction.Extraction.method)
    result: EvalResult
    reward: float
    feedback: str  # the user message that followed this turn (rendered template)
    context: list[int] | None = None  # earlier turns shown in this turn's prompt; None: all
    # (position, content) of the prompt messages that differ from the plain rebuild out of
    # `context` (answers cut to their code, or cut in the middle, to fit a token budget): with
    # them, turn_prompt() gives the messages sent, byte for byte. None: nothing was changed.
    prompt_edits: list[tuple[int, str]] | None = None
    prompt_tokens: int | None = None  # prompt length as counted when the turn was built
    logprobs: list[float] | None = None
    tokens: list[str] | None = None
    token_ids: list[int] | None = None
    finish_reason: str | None = None
    generate_s: float | None = None
    evaluate_s: float | None = None

    @property
    def correct(self) -> bool:
        return bool(self.result.correct) and not self.result.hacks

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "response": self.response,
            "code": self.code,
            "extraction": self.extraction,
            "result": self.result.to_dict(),
            "reward": self.reward,
            "feedback": self.feedback,
            "context": self.context,
            "prompt_edits": [list(e) for e in self.prompt_edits] if self.prompt_edits else None,
            "prompt_tokens": self.prompt_tokens,
            "logprobs": self.logprobs,
            "tokens": self.tokens,
            "token_ids": self.token_ids,
            "finish_reason": self.finish_reason,
            "generate_s": self.generate_s,
            "evaluate_s": self.evaluate_s,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Turn:
        known = {f.name for f in dataclasses.fields(cls)}
        data = {k: v for k, v in d.items() if k in known}  # records from newer versions load
        data["result"] = EvalResult.from_dict(d["result"])
        if data.get("prompt_edits"):
            data["prompt_edits"] = [(int(i), str(c)) for i, c in data["prompt_edits"]]
        return cls(**data)


@dataclass(slots=True)
class Trajectory:
    problem: str
    sample: int
    prompt: list[dict[str, str]]  # the first-turn messages (system prompt if any, then the task)
    turns: list[Turn] = field(default_factory=list)
    model: str | None = None
    level: int | None = None
    error: str | None = None  # an infrastructure failure that ended the episode early
    truncated: bool = False  # the turn budget ran out (Gymnasium sense)
    terminated: bool = False
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def uid(self) -> str:
        return f"{self.problem}#{self.sample}"

    @property
    def messages(self) -> list[dict[str, str]]:
        """The whole conversation, one assistant message and one feedback message per turn."""
        out = [dict(m) for m in self.prompt]
        for i, turn in enumerate(self.turns):
            out.append({"role": "assistant", "content": turn.response})
            if i < len(self.turns) - 1:
                out.append({"role": "user", "content": turn.feedback})
        return out

    @property
    def messages_exact(self) -> bool:
        """Whether `messages` is what the last turn was sent plus its answer (every turn saw the
        whole history, unedited). Otherwise SFT should use rl_rows(): each turn's exact prompt."""
        return all(t.context is None and not t.prompt_edits for t in self.turns)

    def best_turn(self) -> Turn | None:
        """Best verified turn: correct, not hacked; one that passed every held-out shape if any did
        (only checked with --held-out), then the highest speedup (then reward, then the earliest)."""
        good = [t for t in self.turns if t.correct]
        if not good:
            return None

        def rank(t: Turn) -> tuple[bool, float, float, int]:  # NaN or infinite: not measured, 0
            speedup, reward = t.result.speedup or 0.0, t.reward
            return (bool(t.result.held_out_passed), speedup if math.isfinite(speedup) else 0.0,
                    reward if math.isfinite(reward) else 0.0, -t.index)
        return max(good, key=rank)

    def to_dict(self) -> dict[str, Any]:
        return {
            "uid": self.uid,
            "problem": self.problem,
            "sample": self.sample,
            "model": self.model,
            "level": self.level,
            "messages": self.messages,
            "messages_exact": self.messages_exact,
            "prompt": self.prompt,
            "rewards": [t.reward for t in self.turns],
            "turns": [t.to_dict() for t in self.turns],
            "error": self.error,
            "truncated": self.truncated,
            "terminated": self.terminated,
            "metadata": self.metadata,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Trajectory:
        return cls(
            problem=d["problem"],
            sample=int(d["sample"]),
            prompt=list(d["prompt"]),
            turns=[Turn.from_dict(t) for t in d.get("turns") or []],
            model=d.get("model"),
            level=d.get("level"),
            error=d.get("error"),
            truncated=bool(d.get("truncated", False)),
            terminated=bool(d.get("terminated", False)),
            metadata=dict(d.get("metadata") or {}),
        )


def plain_prompt(
    prompt: list[dict[str, str]], turns: list[Turn], context: Iterable[int]
) -> list[dict[str, str]]:
    """The task messages, then each shown turn's answer and the feedback that followed it."""
    out = [dict(m) for m in prompt]
    for j in context:
        out.append({"role": "assistant", "content": turns[j].response})
        out.append({"role": "user", "content": turns[j].feedback})
    return out


def prompt_edits(plain: list[dict[str, str]], sent: list[dict[str, str]]) -> list[tuple[int, str]] | None:
    """What turns `plain` into `sent` (same messages, some contents changed); None: nothing."""
    if [m["role"] for m in plain] != [m["role"] for m in sent]:
        raise ValueError("prompt_edits: the sent prompt does not have the plain prompt's messages")
    edits = [(i, b["content"]) for i, (a, b) in enumerate(zip(plain, sent, strict=True))
             if a["content"] != b["content"]]
    return edits or None


def turn_prompt(traj: Trajectory, turn: Turn) -> list[dict[str, str]]:
    """The messages sent to the policy for `turn`, byte for byte (with its context and edits)."""
    kept = range(turn.index) if turn.context is None else turn.context
    out = plain_prompt(traj.prompt, traj.turns, kept)
    for i, content in turn.prompt_edits or ():
        out[i]["content"] = content
    return out


def rl_rows(traj: Trajectory) -> list[dict[str, Any]]:
    """One row per turn: the exact prompt that turn was sent, its response, reward and log-probs.

    A "prompt_overlong" turn of `--protocol paper` was never sent: its row has the prompt that did
    not fit and an empty response (reward 0), as the authors record it."""
    rows = []
    for turn in traj.turns:
        prompt = turn_prompt(traj, turn)
        rows.append(
            {
                "uid": traj.uid,
                "turn": turn.index,
                "prompt": prompt,
                "response": turn.response,
                "reward": turn.reward,
                "logprobs": turn.logprobs,
                "last_turn": turn.index == len(traj.turns) - 1,
            }
        )
    return rows


def append_jsonl(path: str | Path, traj: Trajectory) -> None:
    """Append one finished episode, flushed to disk (the bench resume log)."""
    line = json.dumps(traj.to_dict(), ensure_ascii=False) + "\n"
    with open(path, "ab+") as f:
        if f.seek(0, 2) > 0:
            f.seek(-1, 2)
            if f.read(1) != b"\n":  # a torn line from a killed run: start on a fresh line
                line = "\n" + line
        f.write(line.encode("utf-8"))
        f.flush()


def scan_jsonl(path: str | Path) -> Iterator[tuple[int, Trajectory | None, Exception | None]]:
    """(line number, episode, None) for each record of an episode log, or (line number, None, why) for a
    line that is torn JSON (a `json.JSONDecodeError`: an interrupted write) or a record this version cannot
    read (another version's); blank lines are passed over."""
    # errors="replace": a write cut inside a multi-byte character leaves bytes that are not UTF-8; the
    # line is then torn JSON, said below, instead of a UnicodeDecodeError for the whole log
    with open(path, encoding="utf-8", errors="replace") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                yield n, Trajectory.from_dict(json.loads(line)), None
            except (ValueError, KeyError, TypeError) as exc:  # ValueError: JSON, or a verdict unknown here
                yield n, None, exc


def iter_jsonl(path: str | Path) -> Iterator[Trajectory]:
    """Read episodes back; a torn last line (an interrupted write), or a record this version cannot
    read (another version's), is skipped with a warning."""
    for n, traj, exc in scan_jsonl(path):
        if traj is None:
            log.warning("%s:%d: skipping unreadable record (%s)", path, n, exc)
        else:
            yield traj


def save_trajectories(path: str | Path, trajs: Iterable[Trajectory]) -> None:
    """Write all episodes; the format follows the suffix: .jsonl or .parquet."""
    p = Path(path)
    items = list(trajs)
    if p.suffix == ".parquet":
        _save_parquet(p, items)
        return
    if p.suffix not in (".jsonl", ".json"):
        raise ConfigError(f"trajectories: unknown format {p.suffix!r} (use .jsonl or .parquet)")
    with open(p, "w", encoding="utf-8") as f:
        for t in items:
            f.write(json.dumps(t.to_dict(), ensure_ascii=False) + "\n")


def load_trajectories(path: str | Path) -> list[Trajectory]:
    p = Path(path)
    if p.suffix == ".parquet":
        return _load_parquet(p)
    return list(iter_jsonl(p))


def _pyarrow() -> Any:
    try:
        import pyarrow  # type: ignore[import-untyped]
        import pyarrow.parquet  # type: ignore[import-untyped]
    except ModuleNotFoundError as exc:
        raise ConfigError("parquet output needs pyarrow (pip install pyarrow)") from exc
    return pyarrow


def _save_parquet(path: Path, trajs: list[Trajectory]) -> None:
    pa = _pyarrow()
    rows = [t.to_dict() for t in trajs]
    table = pa.table(
        {
            "uid": [r["uid"] for r in rows],
            "problem": [r["problem"] for r in rows],
            "sample": [r["sample"] for r in rows],
            "model": [r["model"] for r in rows],
            "messages": [r["messages"] for r in rows],
            "rewards": [r["rewards"] for r in rows],
            # nested, variable per-turn data (EvalResult dicts, log-probs) as one JSON string
            "record": [json.dumps(r, ensure_ascii=False) for r in rows],
        }
    )
    pa.parquet.write_table(table, path)


def _load_parquet(path: Path) -> list[Trajectory]:
    pa = _pyarrow()
    table = pa.parquet.read_table(path, columns=["record"])
    return [Trajectory.from_dict(json.loads(s)) for s in table.column("record").to_pylist()]
