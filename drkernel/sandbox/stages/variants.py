"""Correctness on held-out shapes (`EvalRequest.shape_variants`), after the verdict: a failure here
is counted, never fatal.

A variant on which the reference itself fails is not counted (the problem's fault). A candidate that
fails on a variant (an error, a crash, a hang) fails that variant; a dead sandbox fails the variants
after it too. Hack checks of these runs still apply.
"""

from __future__ import annotations

from typing import TypeVar

from drkernel.sandbox.channel import Context, ReferenceFailure
from drkernel.sandbox.comparator import LocalComparator, ProcessComparator
from drkernel.sandbox.plumbing.process import SandboxFailure
from drkernel.sandbox.stages.correctness import compare_item, load_requests, pair_items
from drkernel.sandbox.wire.protocol import ErrorReply, LoadReply, Run, RunReply

__all__ = ["shape_variants"]

T = TypeVar("T")


class _NotCounted(Exception):
    """A held-out shape that the reference itself cannot run."""


def shape_variants(ctx: Context, comparator: LocalComparator | ProcessComparator) -> None:
    variants = ctx.request.shape_variants
    if not variants:
        return
    passed = checked = 0
    issues: list[str] = []
    for k, snippet in enumerate(variants):
        ctx.verdict.variant_index = k
        try:
            issue = _variant(ctx, comparator, snippet)
        except _NotCounted as exc:
            issues.append(f"variant {k + 1}: not counted: {exc}")
            continue
        except SandboxFailure as exc:
            left = len(variants) - k
            checked += left
            issues.append(f"variant {k + 1}: the submission's sandbox ended "
                          f"({exc.kind}: {exc.message[:200]}); {left} variant(s) failed")
            break
        checked += 1
        if issue is None:
            passed += 1
        else:
            issues.append(f"variant {k + 1}: {issue}")
    ctx.verdict.variant_index = None
    ctx.result.shape_variants_passed = passed
    ctx.result.shape_variants_total = checked
    ctx.result.shape_variant_issues = issues


def _variant(ctx: Context, comparator: LocalComparator | ProcessComparator, snippet: str) -> str | None:
    """None when the candidate matches the reference on this held-out shape, else why not."""
    _, cand_load = _checked(*ctx.channel.both_lenient(*load_requests(ctx, snippet), LoadReply))
    if isinstance(cand_load, str):
        return cand_load
    seeds = [ctx.rng.randrange(1 << 31) for _ in range(2)]
    run = Run(seeds=seeds, tag="variant")
    ref_reply, reply = _checked(*ctx.channel.both_lenient(run, run, RunReply))
    if isinstance(reply, str):
        return reply
    for seed, r, c in pair_items(seeds, ref_reply, reply):
        trial = compare_item(ctx, comparator, r, c, seed)
        if not trial.passed:
            return f"output differs: {trial.issue or 'mismatch'}"
    return None


def _checked(ref: T | ReferenceFailure, cand: T | ErrorReply) -> tuple[T, T | str]:
    """The reference failing: not counted; the candidate failing: the reason, as text."""
    if isinstance(ref, ReferenceFailure):
        raise _NotCounted(f"the reference failed on this shape: {ref.message[:300]}")
    if isinstance(cand, ErrorReply):
        return ref, f"{cand.error.kind}: {cand.error.message[:300]}"
    return ref, cand
