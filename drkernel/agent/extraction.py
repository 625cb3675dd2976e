"""Model response -> submitted kernel source (docs/paper_spec.md §2.5), or a clear "no code" verdict.

Order: an ```answer block, then the authors' marker blocks, then the last fenced block (an unclosed
final fence, as left by a truncated response, counts; of complete blocks, the last that defines the
entry class, else the last that is not empty), then the whole response if it defines the entry class;
thinking (`<think>` sections, opened by the chat template or cut by the token limit) is never searched.
`preflight_result` turns a missing submission into a compile error without a judge, `overlong_result` a
prompt that did not fit the model's context; `why_not_judged` tells such verdicts apart from the judge's.
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass
from enum import StrEnum

from drkernel.types import ErrorInfo, EvalOutcome, EvalResult

__all__ = ["Extraction", "NotJudged", "extract_code", "overlong_result", "preflight_result", "turn_outcome",
           "why_not_judged"]


class NotJudged(StrEnum):
    """Why the judge never saw a turn: the error kind of the compile_error verdict the agent gives it."""

    NO_CODE = "no_code"
    """The model's answer held no code, or none defining class ModelNew: the model's format failure."""
    PROMPT_OVERLONG = "prompt_overlong"
    """The prompt did not fit the model's context, so nothing was sent and the episode ended
    (docs/paper_spec.md §2.7): the context ran out, the model wrote nothing."""

_FENCE = re.compile(r"^[ \t]*```[ \t]*([\w+.-]*)[^\n]*\n(.*?)^[ \t]*```", re.M | re.S)
_OPEN_FENCE = re.compile(r"^[ \t]*```[ \t]*([\w+.-]*)[^\n]*\n", re.M)
_MARKERS = (
    re.compile(r"^#\s*Kernel Implementation[^\n]*\n(.*?)^#\s*End\b", re.M | re.S),
    re.compile(r"```python\s*\n(#\s*Kernel[^\n]*\n.*?)```", re.S),
    re.compile(r"^#\s*Your implementation:[^\n]*\n(.*?)(?:^```|\Z)", re.M | re.S),
    re.compile(r"^#\s*Generated kernel:[^\n]*\n(.*?)(?:^```|\Z)", re.M | re.S),
)
_THINK = re.compile(r"<think>.*?</think>", re.S)


@dataclass(frozen=True, slots=True)
class Extraction:
    code: str | None  # None: the response holds no code
    method: str  # "answer_block" | "marker" | "last_fence" | "unclosed_fence" | "whole_response" | "none"

    @property
    def found(self) -> bool:
        return self.code is not None


def _fences(text: str) -> list[tuple[str, str]]:
    # a fence indented in a list item indents its code as much (CommonMark): the code starts at the margin
    return [(m.group(1).lower(), textwrap.dedent(m.group(2))) for m in _FENCE.finditer(text)]


def extract_code(response: str, entry_point: str = "Model") -> Extraction:
    """Pick the submission out of a response.

    >>> extract_code("text\\n```python\\nx = 1\\n```\\nmore\\n```python\\nclass ModelNew: pass\\n```").code
    'class ModelNew: pass\\n'
    >>> extract_code("I cannot help with that.").method
    'none'
    """
    text = _without_reasoning(response)
    fences = _fences(text)
    answers = [body for lang, body in fences if lang == "answer"]
    if answers:
        return Extraction(answers[-1], "answer_block")
    for pattern in _MARKERS:
        found = pattern.findall(text)
        if found and found[-1].strip():
            return Extraction(found[-1], "marker")
    tail = _unclosed_tail(text, fences)
    if tail is not None:
        return Extraction(tail, "unclosed_fence")
    # the last block that defines the entry class, else the last that holds anything: a usage example
    # or an empty block after the kernel hid it (scored no_code, or the whole answer sent to the judge)
    bodies = [body for _, body in fences if body.strip()]
    defining = [body for body in bodies if f"class {entry_point}New" in body]
    if defining or bodies:
        return Extraction((defining or bodies)[-1], "last_fence")
    if f"class {entry_point}New" in text:
        return Extraction(text, "whole_response")
    return Extraction(None, "none")


def _without_reasoning(response: str) -> str:
    """The response less its thinking: `<think>` sections, the reasoning before a lone `</think>` (a chat
    template that opened the section in the prompt: DeepSeek-R1, Qwen3 thinking models), and a section
    left open at the end (an answer that ran out of tokens while thinking).

    >>> _without_reasoning("draft</think>final<think>cut off")
    'final'
    """
    text = _THINK.sub("", response)
    closed = text.rfind("</think>")
    if closed >= 0:
        text = text[closed + len("</think>") :]
    opened = text.find("<think>")
    return text if opened < 0 else text[:opened]


def _unclosed_tail(text: str, fences: list[tuple[str, str]]) -> str | None:
    """Body of a final fence that was opened but never closed (a truncated response)."""
    end = 0
    for m in _FENCE.finditer(text):
        end = m.end()
    opened = _OPEN_FENCE.search(text, end)
    if opened is None:
        return None
    body = text[opened.end() :]
    return body if "class " in body else None


def preflight_result(extraction: Extraction, entry_point: str = "Model") -> EvalResult | None:
    """A compile-error verdict for a response with no usable code; None when it should be judged.

    Like the authors' client pre-flight (docs/paper_spec.md §2.5) the judge is not called for these.
    """
    if extraction.code is None:
        return EvalResult(
            outcome=EvalOutcome.COMPILE_ERROR,
            error=ErrorInfo(
                kind=NotJudged.NO_CODE.value, message="no code block was found in the response"
            ),
        )
    if f"class {entry_point}New" not in extraction.code:
        return EvalResult(
            outcome=EvalOutcome.COMPILE_ERROR,
            error=ErrorInfo(
                kind=NotJudged.NO_CODE.value,
                message=f"the submitted code does not define class {entry_point}New",
            ),
        )
    return None


def overlong_result() -> EvalResult:
    """The verdict of a turn whose prompt did not fit the model's context (docs/paper_spec.md §2.7): an
    empty turn, reward 0; the judge is not called."""
    return EvalResult(
        outcome=EvalOutcome.COMPILE_ERROR,
        error=ErrorInfo(
            kind=NotJudged.PROMPT_OVERLONG.value, message="the prompt did not fit the model's context"
        ),
    )


def why_not_judged(result: EvalResult) -> NotJudged | None:
    """Why the agent decided a turn without the judge; None when the judge gave the verdict. The one
    place that tells a turn without code from a prompt that did not fit (metrics, report, feedback and
    train rl's metrics ask here).

    >>> why_not_judged(overlong_result())
    <NotJudged.PROMPT_OVERLONG: 'prompt_overlong'>
    """
    if result.outcome is not EvalOutcome.COMPILE_ERROR or result.error is None:
        return None
    try:
        return NotJudged(result.error.kind)
    except ValueError:  # a compile error of the judge's
        return None


def turn_outcome(result: EvalResult) -> str:
    """A turn's outcome as the reports name it: why the judge never saw it (no_code, prompt_overlong),
    else the judge's outcome.

    >>> turn_outcome(EvalResult(outcome=EvalOutcome.INCORRECT))
    'incorrect'
    """
    reason = why_not_judged(result)
    return reason.value if reason is not None else result.outcome.value
