"""The static gate, loading both sandboxes, the correctness trials and the launch modes.

The judge compares every output itself (sandbox/comparator.py) from the files both sandboxes wrote,
and reads each candidate item's own report (aliasing, mutation, threads, launches) against the
reference's for the same call.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import os
from typing import NoReturn

import torch

from drkernel.hacks import HackCode
from drkernel.sandbox.channel import Context, Stop, own_cap_note, resource_shaped
from drkernel.sandbox.comparator import JudgeFault, LocalComparator, ProcessComparator
from drkernel.sandbox.devicelock import gpu_work
from drkernel.sandbox.plumbing.process import SandboxFailure
from drkernel.sandbox.static import check_source
from drkernel.sandbox.wire.helpermsg import CompareJob
from drkernel.sandbox.wire.protocol import Load, LoadReply, Modes, ModesReply, OutputItem, Run, RunReply
from drkernel.types import ErrorInfo, EvalOutcome, TrialReport

__all__ = ["WEAK_REFERENCE_VARIATION", "compare_item", "launch_modes", "load", "load_requests", "pair_items",
           "reference_hash", "static_gate", "trials"]

WEAK_REFERENCE_VARIATION = 1e-2  # as the audit's low_variation flag
Comparator = LocalComparator | ProcessComparator


def static_gate(ctx: Context) -> None:
    """The AST gate: a first filter (never the barrier: the sandbox is)."""
    opts, verdict = ctx.opts, ctx.verdict
    report = check_source(ctx.request.kernel_code, opts.entry_point, opts.static_policy)
    if report.too_complex:
        verdict.finish(EvalOutcome.COMPILE_ERROR, ErrorInfo("source_too_complex", report.too_complex))
    if report.syntax_error:
        verdict.finish(EvalOutcome.COMPILE_ERROR, ErrorInfo("syntax_error", report.syntax_error))
    if not report.has_model_new:
        msg = f"the submission defines no class {opts.entry_point}New"
        verdict.finish(EvalOutcome.COMPILE_ERROR, ErrorInfo("missing_model_new", msg))
    ctx.result.compiled = True
    for code, evidence in report.hacks.items():
        verdict.hack(code, f"static: {evidence}")
    if ctx.result.hacks:
        raise Stop


def load(ctx: Context) -> None:
    ref_reply, _ = ctx.channel.both(*load_requests(ctx, ""), LoadReply)
    ctx.problem_flops = ref_reply.flops


def load_requests(ctx: Context, snippet: str) -> tuple[Load, Load]:
    """The load op for the reference and for the candidate, at the sizes `snippet` sets. The
    submission file is (re)written each time: it sits in the submission's own folder, where the
    submission may have left a link in its place (SandboxProcess.write_file replaces it)."""
    source = ctx.request.kernel_code.encode("utf-8", "surrogatepass")  # unreadable text: its import_error
    path = ctx.channel.cand_proc.write_file("submission.py", source)
    code = ctx.request.reference_code
    ref = Load(reference_code=code, size_snippet=snippet, reference_hash=reference_hash(code),
               init_seed=ctx.init_seed, entry_point=ctx.opts.entry_point, candidate_path=None)
    return ref, dataclasses.replace(ref, candidate_path=path)


def trials(ctx: Context, comparator: Comparator) -> None:
    request = Run(seeds=list(ctx.seeds), tag="trial")
    ref_reply, reply = ctx.channel.both(request, request, RunReply)
    if reply.items:  # the candidate's JIT compile (or cache load) is in its first call
        ctx.result.stage_s["first_call"] = round(reply.items[0].forward_s, 4)
    ctx.output_bytes = _output_bytes(ref_reply.items[0]) if ref_reply.items else None
    prints: list[torch.Tensor] = []
    for seed, ref_item, item in pair_items(ctx.seeds, ref_reply, reply):
        ctx.result.trials.append(compare_item(ctx, comparator, ref_item, item, seed, prints))
        known = ctx.result.launched_kernels
        known.extend(n[:200] for n in dict.fromkeys(item.launches) if n[:200] not in known)
        del known[64:]  # names the sandbox reports: bounded in the result
        if not item.launches:
            ctx.verdict.hack(HackCode.DECOY_KERNEL,
                             f"trial with seed {seed} launched no Triton kernel of the submission")
    _weak_reference(ctx, prints)
    if not all(t.passed for t in ctx.result.trials):
        ctx.result.outcome = EvalOutcome.INCORRECT


def pair_items(seeds: list[int], ref_reply: RunReply,
               reply: RunReply) -> list[tuple[int, OutputItem, OutputItem]]:
    """(seed, reference item, candidate item) per call; a sandbox that answered another number of
    calls than it was asked is a protocol failure."""
    if len(reply.items) != len(seeds):
        raise SandboxFailure("protocol", f"the sandbox answered {len(reply.items)} of {len(seeds)} calls")
    return list(zip(seeds, ref_reply.items, reply.items, strict=True))


def compare_item(ctx: Context, comparator: Comparator, ref_item: OutputItem, item: OutputItem, seed: int,
                 prints: list[torch.Tensor] | None = None) -> TrialReport:
    """Compare one output pair, and read what the candidate's call did beside the reference's."""
    hack = ctx.verdict.hack
    for evidence in item.subclass:
        hack(HackCode.TENSOR_SUBCLASS, evidence)
    if item.aliases_input and not ref_item.aliases_input:
        hack(HackCode.OUTPUT_ALIASES_INPUT, "an output shares storage with an input")
    if item.aliases_previous and not ref_item.aliases_previous:
        hack(HackCode.OUTPUT_ALIASES_PREVIOUS, "an output shares storage with the previous call's output")
    if item.aliases_param and not ref_item.aliases_param:
        hack(HackCode.OUTPUT_ALIASES_PARAMETER, "an output shares storage with a parameter")
    if item.mutated_input and not ref_item.mutated_input:
        hack(HackCode.INPUT_MUTATION, "the submission modified its inputs in place")
    if item.threads > 0:
        hack(HackCode.ASYNC_THREAD,
             f"{item.threads} thread(s) of the submission alive after forward returned")
    if item.file != ref_item.file:  # the judge names the files: `{tag}_{k}.pt` in each sandbox's folder
        # another name would make the judge read (the reference's outputs) or remove (as root) a file
        # the candidate chose: never follow it
        ctx.channel.cand_proc.kill()
        raise SandboxFailure("protocol",
                             f"the sandbox named its output {item.file[:200]!r}, not {ref_item.file!r}")
    ref_path = os.path.join(ctx.channel.ref_proc.workdir, ref_item.file)
    out_path = os.path.join(ctx.channel.cand_proc.workdir, ref_item.file)
    opts = ctx.opts
    job = CompareJob(ref_path=ref_path, ref_count=len(ref_item.dtypes), out_path=out_path,
                     out_count=len(item.dtypes), ref_structure=ref_item.structure,
                     out_structure=item.structure, atol=opts.atol, rtol=opts.rtol,
                     relative=opts.check_relative_error, fingerprint=prints is not None,
                     expect=[[d, s] for d, s in zip(ref_item.dtypes, ref_item.shapes, strict=True)])
    try:
        try:
            c = comparator.compare(job)
        except JudgeFault as fault:
            c = _compare_alone(ctx, comparator, job, fault)
    finally:  # outputs of GPU-sized problems are large: keep at most one pair on disk
        for proc in (ctx.channel.ref_proc, ctx.channel.cand_proc):
            proc.remove_file(ref_item.file)
    if prints is not None and c.fingerprint is not None:
        prints.append(torch.tensor(c.fingerprint, dtype=torch.float64))
    return TrialReport(seed, c.passed, c.max_abs_diff, c.max_rel_diff, c.rel_l2, c.issue,
                       mean_abs_diff=c.mean_abs_diff)


def _compare_alone(ctx: Context, comparator: Comparator, job: CompareJob, fault: JudgeFault) -> NoReturn:
    """A comparison that failed for want of a shared resource (GPU memory, host memory) while the
    candidate's sandbox was alive is run again with it gone, on the same files. Passing then, the
    candidate starved the judge: its failure, never an infra_error. Anything else: the judge's fault."""
    cand = ctx.channel.cand_proc
    if not resource_shaped(str(fault)) or not cand.alive():
        raise fault
    own_cap = own_cap_note(str(fault))
    if own_cap:
        raise JudgeFault(f"{str(fault)[:3000]} {own_cap}") from None
    # its processes, and its device memory, gone; its files stay for the comparison
    held = ctx.channel.stop_candidate(str(fault), cand.stop)
    comparator.restart()
    try:
        comparator.compare(job)
    except JudgeFault:
        raise fault from None
    what = f"the judge's comparison failed while the submission's sandbox ran ({str(fault)[:300]})"
    if held.within_share:
        raise JudgeFault(f"{what}, and passed with that sandbox gone; but {held.note}")
    raise SandboxFailure("resource_exhaustion", f"{what}, and passed with that sandbox gone"
                         f"{'; ' + held.note if held.note else ''}: the submission starved the judge of a "
                         "resource it shares (GPU or host memory)")


def _weak_reference(ctx: Context, prints: list[torch.Tensor]) -> None:
    """Warn when the reference's outputs barely change between the trials' random inputs: there,
    a kernel that returns one stored output passes every check (KernelBench issue #165)."""
    if len(prints) < 2 or any(p.numel() != prints[0].numel() for p in prints):
        return
    base = prints[0]
    norm = float(base.norm())
    spread = max(float((p - base).norm()) for p in prints[1:])
    warnings = ctx.result.warnings
    if norm == 0.0 and spread == 0.0:
        warnings.append("weak_reference: the reference output is all zeros on every trial's inputs; "
                        "an all-zeros kernel is correct here")
    elif norm > 0.0 and spread / norm < WEAK_REFERENCE_VARIATION:
        warnings.append(f"weak_reference: the reference output changes by at most {spread / norm:.2e} "
                        f"(relative L2) between the {len(prints)} trials' random inputs; a kernel that "
                        "ignores its inputs would pass")


def launch_modes(ctx: Context) -> None:
    """The submission's own kernels must launch in train/eval x grad/no-grad alike."""
    if ctx.verdict.failed:
        return
    with gpu_work(ctx.device, "launch_modes"):
        reply = ctx.channel.cand(Modes(seed=ctx.seeds[0]), ModesReply)
    missing = [mode for mode, n in reply.modes.items() if n == 0]
    if missing or not reply.modes:
        ctx.verdict.hack(HackCode.DECOY_KERNEL, "no successful launch of a submission kernel in: "
                         + (", ".join(missing) or "any mode"))


def _output_bytes(item: OutputItem) -> int | None:
    try:
        return sum(math.prod(shape)
                   * torch.empty(0, dtype=getattr(torch, dt.removeprefix("torch."))).element_size()
                   for dt, shape in zip(item.dtypes, item.shapes, strict=True))
    except (AttributeError, TypeError, ValueError):
        return None


def reference_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]
