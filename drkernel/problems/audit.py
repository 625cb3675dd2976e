"""Problem audits: list[Problem] -> list[ProblemAudit], flagging problems a do-nothing kernel passes.

In-process probes (trusted reference only) measure output size and seed variation and test null
answers against the tolerance; optional judge probes send null ModelNew candidates to the real judge.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from drkernel.errors import DrKernelError
from drkernel.problems.nulls import constant_candidate, identity_candidate, shrink_sizes
from drkernel.problems.reference import failure_text, flatten_tensors, load_reference
from drkernel.types import EvalOptions, EvalRequest, EvalResult, Problem

__all__ = ["POLICIES", "AuditConfig", "ProblemAudit", "audit_problem", "audit_suite", "passes",
           "probe_outputs"]

log = logging.getLogger(__name__)

# name -> (atol, rtol, bound on ||out-ref||/||ref|| or None). "drkernel" is the judge's fp32
# default (sandbox/comparison.py); "kernelbench" is allclose(1e-2, 1e-2), as in KernelBench v0.1
# and the paper (docs/paper_spec.md §3.2).
POLICIES: dict[str, tuple[float, float, float | None]] = {
    "drkernel": (1e-2, 1e-2, 1e-3),
    "kernelbench": (1e-2, 1e-2, None),
}


class _Judge(Protocol):
    def evaluate(self, request: EvalRequest) -> EvalResult: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditConfig:
    seeds: tuple[int, ...] = (1, 2, 3)  # input seeds; the model is built once under init_seed
    init_seed: int = 0
    min_variation: float = 1e-2  # relative L2 change of the output between input seeds
    max_input_numel: int | None = None  # shrink references whose inputs hold more elements
    judge_options: EvalOptions = field(
        default_factory=lambda: EvalOptions(num_perf_trials=1, num_warmup=0, profile=False)
    )

    def __post_init__(self) -> None:
        from drkernel.errors import ConfigError

        if len(self.seeds) < 3:
            raise ConfigError("audit.seeds: need at least 3 input seeds")
        if self.max_input_numel is not None and self.max_input_numel < 1:
            raise ConfigError(f"audit.max_input_numel: must be >= 1, got {self.max_input_numel}")


@dataclass(slots=True)
class ProblemAudit:
    name: str
    level: int | None
    flags: list[str] = field(default_factory=list)
    max_abs: float | None = None
    variation: float | None = None
    output_shape: list[int] | None = None
    size_ratio: float = 1.0  # input elements audited / input elements of the problem as given
    nulls: dict[str, str] = field(default_factory=dict)  # probe -> "fails" | "PASSES" | "n/a" | outcome
    error: str | None = None

    @property
    def status(self) -> str:
        return "error" if self.error else ("flagged" if self.flags else "ok")

    def to_dict(self) -> dict[str, Any]:
        """As JSON takes it: a measure that is no number (NaN or inf outputs) is None."""
        out = {**dataclasses.asdict(self), "status": self.status}
        for name in ("max_abs", "variation"):
            if out[name] is not None and not math.isfinite(out[name]):
                out[name] = None
        return out


def passes(out: Sequence[torch.Tensor], ref: Sequence[torch.Tensor], policy: str) -> bool:
    """Would `out` pass as the answer `ref` under a tolerance policy (shapes must match)? An infinity
    is matched only by the same infinity; a NaN by a NaN under the judge's policy (its positions must
    match, sandbox/comparison.py), by nothing under allclose's (KernelBench's)."""
    atol, rtol, rel_l2 = POLICIES[policy]
    for o, r in zip(out, ref, strict=True):
        if o.shape != r.shape:
            return False
        o, r = o.double(), r.double()
        if not bool(torch.isclose(o, r, rtol=rtol, atol=atol, equal_nan=rel_l2 is not None).all()):
            return False
        special = ~torch.isfinite(r)  # matched above; the judge leaves them out of its norms
        o, r = o.masked_fill(special, 0.0), r.masked_fill(special, 0.0)
        if rel_l2 is not None and float((o - r).norm()) > rel_l2 * float(r.norm()):
            return False
    return True


def _half_input(x: torch.Tensor) -> torch.Tensor:
    """Every odd element of the last dimension replaced by its even neighbour: what a kernel that
    reads only half of the input would see."""
    if x.ndim == 0 or x.shape[-1] < 2 or not x.is_floating_point():
        return x
    y = x.clone()
    y[..., 1::2] = x[..., 0 : x.shape[-1] // 2 * 2 : 2]
    return y


def _forward(model: torch.nn.Module, inputs: list[Any]) -> list[torch.Tensor]:
    with torch.no_grad():
        return [t.detach().float() for t in flatten_tensors(model(*inputs))]


def probe_outputs(problem: Problem, cfg: AuditConfig, audit: ProblemAudit,
                  device: str = "cpu") -> tuple[torch.nn.Module, list[list[Any]], list[list[torch.Tensor]]]:
    """In-process, on `device`: the model, each input seed's inputs and outputs (as float32), and in
    `audit` the flags for tiny, seed-insensitive and null answers (`drkernel suite survey` runs this
    at full size on a GPU)."""
    ref = load_reference(problem)
    model = ref.build(cfg.init_seed, device)
    # made on the device, as the judge makes them there: a full-size torch.randn on the host takes seconds
    with torch.device(device):
        inputs = [ref.inputs(s, device) for s in cfg.seeds]
    outs = [_forward(model, x) for x in inputs]
    if not outs[0]:
        raise DrKernelError("the reference returned no tensor")
    audit.output_shape = list(outs[0][0].shape)
    audit.max_abs = max(float(t.abs().max()) if t.numel() else 0.0 for o in outs for t in o)
    diffs = [sum(float((a - b).norm()) for a, b in zip(x, y)) / max(sum(float(a.norm()) for a in x), 1e-30)
             for x, y in itertools.combinations(outs, 2)]
    audit.variation = min(diffs)
    if audit.max_abs < POLICIES["drkernel"][0]:
        audit.flags.append("tiny_output")
    if audit.variation < cfg.min_variation:
        audit.flags.append("low_variation")
    answers: dict[str, Callable[[int], list[torch.Tensor] | None]] = {
        "zeros": lambda i: [torch.zeros_like(t) for t in outs[i]],
        "constant": lambda i: [torch.full_like(t, float(r.mean())) for t, r in zip(outs[i], outs[0])],
        "replay": lambda i: outs[0],
        "identity": lambda i: _identity(inputs[i], outs[i]),
        "half_input": lambda i: _forward(model, [_half_input(x) if isinstance(x, torch.Tensor) else x
                                                 for x in inputs[i]]),
    }
    for name, answer in answers.items():
        for policy in POLICIES:
            got = [answer(i) for i in range(1, len(outs))]
            ok = all(g is not None and passes(g, outs[i + 1], policy) for i, g in enumerate(got))
            audit.nulls[f"{name}@{policy}"] = "n/a" if got[0] is None else ("PASSES" if ok else "fails")
            if ok and got[0] is not None:
                audit.flags.append(f"{name}_passes@{policy}")
    return model, inputs, outs


def _identity(inputs: list[Any], out: list[torch.Tensor]) -> list[torch.Tensor] | None:
    if len(out) != 1:
        return None
    for x in inputs:
        if isinstance(x, torch.Tensor) and x.shape == out[0].shape and x.is_floating_point():
            return [x.float()]
    return None


def _judge_nulls(problem: Problem, outs: list[list[torch.Tensor]], inputs: list[Any], judge: _Judge,
                 cfg: AuditConfig, audit: ProblemAudit) -> None:
    """Send null ModelNew candidates to the real judge; flag any it accepts as correct."""
    if len(outs[0]) != 1 or outs[0][0].dtype != torch.float32:
        audit.nulls["judge"] = "n/a (not a single float32 output)"
        return
    shape = tuple(outs[0][0].shape)
    candidates = {"zeros": constant_candidate(shape, 0.0),
                  "constant": constant_candidate(shape, float(outs[0][0].mean()))}
    index = next((i for i, x in enumerate(inputs) if isinstance(x, torch.Tensor)
                  and x.shape == outs[0][0].shape and x.dtype == torch.float32), None)
    if index is not None:
        candidates["identity"] = identity_candidate(shape, index)
    for name, code in candidates.items():
        request = EvalRequest(reference_code=problem.reference_code, kernel_code=code,
                              options=cfg.judge_options, problem_name=problem.name,
                              task_id=f"audit:{problem.name}:{name}")
        result = judge.evaluate(request)
        audit.nulls[f"{name}@judge"] = "PASSES" if result.correct else result.outcome.value
        if result.correct:
            audit.flags.append(f"{name}_passes@judge")


def audit_problem(problem: Problem, cfg: AuditConfig | None = None,
                  judge: _Judge | None = None) -> ProblemAudit:
    """Audit one problem; a failing reference is reported as an error, never raised."""
    cfg = cfg or AuditConfig()
    audit = ProblemAudit(name=problem.name, level=problem.level)
    try:
        if cfg.max_input_numel is not None:
            problem, audit.size_ratio = shrink_sizes(problem, cfg.max_input_numel)
        _, inputs, outs = probe_outputs(problem, cfg, audit)
        if judge is not None:
            _judge_nulls(problem, outs, inputs[0], judge, cfg, audit)
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - user benchmark code: a bad one is a finding
        log.debug("audit of %s failed", problem.name, exc_info=True)
        audit.error = failure_text(exc)[:300]
    return audit


def audit_suite(problems: Sequence[Problem], cfg: AuditConfig | None = None, judge: _Judge | None = None,
                on_result: Callable[[ProblemAudit], None] | None = None) -> list[ProblemAudit]:
    results = []
    for problem in problems:
        result = audit_problem(problem, cfg, judge)
        if on_result is not None:
            on_result(result)
        results.append(result)
    return results
