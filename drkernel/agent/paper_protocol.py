"""A `--protocol paper` run's config -> where it still differs from the authors' evaluation.

Each entry names one place where the run does not do what the authors' code does (KernelGYM at
3a84417, docs/paper_spec.md), so that a score is read with its caveats: `config.json` (bench) and
`report.json` (optimize) carry them as `paper_differences`. Runs under our protocol carry none.
"""

from __future__ import annotations

from collections.abc import Sequence

from drkernel.agent.loop import LoopConfig
from drkernel.agent.prompts import data_prompt
from drkernel.types import Problem

__all__ = ["ALWAYS", "paper_differences"]

# what no flag changes (yet): the judge's own ways
ALWAYS = (
    "timing: the authors' way (3 warm-up calls, then 10 calls on one set of inputs each between its own "
    "CUDA events, means rounded to 3 significant digits, speedup their quotient), but the reference's "
    "once per problem and device with no candidate alive (cached), not per evaluation; under Triton's "
    "interpreter the host clock. A candidate whose verdict is not ok (a hack the judge's own timing "
    "found included) gets no speedup",
    "result JSON: triton_profiler_matches holds the launched kernels' names only (the authors add "
    "grid, module and file); profiling.kernels has no cpu_time_us, and the total is the device time of "
    "all profiled kernels (theirs: cuda + cpu time of the kernels with cuda time)",
    "result JSON: error_message and error_code are drkernel's (for a hacked kernel, its hack classes with "
    "advice); every hack drkernel detects reads as the authors' decoy kernel",
    "hack checks: drkernel's judge (docs/errors.md) catches more than the authors' decoy check, so a "
    "kernel they would time can be judged hacked here",
    "prompt tokens: each message's tokens plus 8 for the chat template (characters / 4 without "
    "--tokenizer); the authors count the chat template's token ids, so the over-long edge "
    "(max_model_len - 1) and the room left for an answer are approximate",
    "code extraction: of several complete code blocks, the last that defines class ModelNew (else the "
    "last that is not empty); the authors take the last block whatever it holds, so a usage example "
    "after the kernel is their no-code turn and drkernel's judged kernel; thinking before a lone "
    "</think> is never searched",
)


def paper_differences(config: LoopConfig, problems: Sequence[Problem]) -> list[str]:
    """The differences of a run from the authors' evaluation; [] under our protocol."""
    env = config.env
    if env.feedback.style != "paper":
        return []
    out: list[str] = []
    own = sum(data_prompt(p) is not None for p in problems)
    if own < len(problems):
        out.append(f"first-turn prompt: {len(problems) - own} of {len(problems)} problem(s) carry no prompt "
                   "of their own (the authors' parquet 'prompt'), and are asked in drkernel's words "
                   "(agent/templates/first_turn.txt, with an import allow-list the authors' prompt lacks)")
    if env.prompts.template_file is None:
        out.append("later-turn prompt: drkernel's words after the authors' template "
                   "(agent/templates/paper_later_turn.txt); --prompt-template takes your copy of their "
                   "prompt config (multi_turn_kernel.yaml)")
    if env.context.max_model_len is None:
        out.append("context: no --max-model-len, so answers are not cut to the room the prompt leaves")
    out.extend(ALWAYS)
    return out
