"""Audits: the built-in suite passes its own audit; degenerate problems are flagged in-process and
by the real judge; sizes shrink for CPU audits."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from drkernel.errors import ConfigError
from drkernel.problems.audit import AuditConfig, audit_problem, audit_suite, passes
from drkernel.problems.nulls import constant_candidate, identity_candidate, shrink_sizes
from drkernel.problems.reference import load_reference
from drkernel.problems.suite import builtin_problem, load_builtin_suite
from drkernel.sandbox.judge import Judge
from drkernel.types import Problem

_TEMPLATE = """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return {expr}


batch_size = {batch}
dim = {dim}


def get_inputs():
    return [torch.{gen}(batch_size, dim)]


def get_init_inputs():
    return []
"""


def _problem(name: str, expr: str, gen: str = "randn", batch: str = "8", dim: str = "512") -> Problem:
    return Problem(name=name, reference_code=_TEMPLATE.format(expr=expr, gen=gen, batch=batch, dim=dim))


RELU_ON_RAND = _problem("relu_on_rand", "torch.relu(x)", gen="rand")  # identity passes
TINY_SOFTMAX = _problem("tiny_softmax", "torch.softmax(x, dim=1)", dim="20000")  # KB #165: outputs ~5e-5
MEAN_LOSS = _problem("mean_loss", "torch.mean((x - 0.5) ** 2)", gen="rand", dim="4096")  # concentrated
HONEST = _problem("gelu", "torch.nn.functional.gelu(x)")


def test_builtin_suite_passes_its_own_audit_at_both_sizes() -> None:
    cpu = audit_suite(load_builtin_suite("cpu"))
    assert [(a.name, a.flags, a.error) for a in cpu if a.status != "ok"] == []
    gpu = audit_suite(load_builtin_suite("gpu"), AuditConfig(max_input_numel=200_000))
    assert [(a.name, a.flags, a.error) for a in gpu if a.status != "ok"] == []
    assert all(a.size_ratio < 1 for a in gpu)


def test_degenerate_problems_are_flagged_in_process() -> None:
    relu, tiny, loss, honest = audit_suite([RELU_ON_RAND, TINY_SOFTMAX, MEAN_LOSS, HONEST])
    assert "identity_passes@drkernel" in relu.flags and relu.status == "flagged"
    assert "tiny_output" in tiny.flags and "zeros_passes@kernelbench" in tiny.flags
    assert "zeros_passes@drkernel" not in tiny.flags  # the relative-L2 bound catches zeros
    assert {"low_variation", "constant_passes@kernelbench", "replay_passes@kernelbench",
            "half_input_passes@kernelbench"} <= set(loss.flags)
    assert honest.flags == [] and honest.nulls["identity@drkernel"] == "fails"
    assert honest.to_dict()["status"] == "ok"


def test_broken_reference_is_an_error_not_an_exception() -> None:
    audit = audit_problem(_problem("broken", "x.no_such_method()"))
    assert audit.status == "error" and "AttributeError" in (audit.error or "")


def test_odd_input_lists_are_named() -> None:
    """KernelBench references return lists; a bare tensor was split into its rows (forward 'takes 2
    positional arguments but 9 were given'), None was 'argument after * must be an iterable'."""
    bare = Problem("bare", _TEMPLATE.format(expr="x * 2", gen="randn", batch="8", dim="4").replace(
        "return [torch.randn(batch_size, dim)]", "return torch.randn(batch_size, dim)"))
    none = Problem("none", _TEMPLATE.format(expr="x * 2", gen="randn", batch="8", dim="4").replace(
        "def get_init_inputs():\n    return []", "def get_init_inputs():\n    return None"))
    assert audit_problem(bare).error == ("ProblemError: bare: get_inputs() returned a Tensor, not a list "
                                         "of inputs ([x], not x)")
    assert audit_problem(none).error == ("ProblemError: none: get_init_inputs() returned None, not a list "
                                         "of inputs ([x], not x)")


def test_passes_applies_both_policies() -> None:
    ref = [torch.full((100,), 0.001)]
    assert passes([torch.zeros(100)], ref, "kernelbench")
    assert not passes([torch.zeros(100)], ref, "drkernel")
    assert not passes([torch.zeros(3)], [torch.zeros(4)], "kernelbench")
    with pytest.raises(ConfigError):
        AuditConfig(seeds=(1, 2))


def test_passes_reads_inf_and_nan_as_the_judge_and_allclose_do() -> None:
    """An infinite reference element is matched only by the same infinity (|0 - inf| <= inf let zeros
    pass); a NaN by a NaN in the judge's policy, by nothing in allclose's (KernelBench's)."""
    inf = torch.tensor([float("inf"), -float("inf"), 1.0])
    for policy in ("drkernel", "kernelbench"):
        assert not passes([torch.zeros(3)], [inf], policy)
        assert not passes([torch.tensor([float("inf"), float("inf"), 1.0])], [inf], policy)
        assert passes([inf.clone()], [inf], policy)
    nan = torch.tensor([float("nan"), 1.0])
    assert passes([nan.clone()], [nan], "drkernel") and not passes([nan.clone()], [nan], "kernelbench")
    assert not passes([torch.tensor([0.0, 1.0])], [nan], "drkernel")
    audit = audit_problem(_problem("divides_by_zero", "x / 0.0"))
    assert not [f for f in audit.flags if f.startswith("zeros_passes")], audit.flags


def test_shrink_sizes_keeps_derived_constants_consistent() -> None:
    code = _TEMPLATE.format(expr="x + self.b", gen="randn", batch="256", dim="1024 * 4")
    code = code.replace("super().__init__()",
                        "super().__init__()\n        self.b = torch.nn.Parameter(torch.zeros(shape))")
    code += "\nshape = (dim,)\n"
    small, ratio = shrink_sizes(Problem(name="p", reference_code=code), 10_000)
    ref = load_reference(small)
    assert ref.call_numel() <= 10_000 and ratio < 0.01
    out = ref.build(0)(*ref.inputs(0))
    assert out.shape[1] == ref.namespace["dim"] < 4096


@pytest.fixture(scope="module")
def judge() -> Iterator[Judge]:
    with Judge(device="cpu") as j:
        yield j


def test_judge_nulls_flag_identity_and_spare_builtins(judge: Judge) -> None:
    relu = audit_problem(RELU_ON_RAND, judge=judge)
    assert relu.nulls["identity@judge"] == "PASSES" and "identity_passes@judge" in relu.flags
    assert relu.nulls["zeros@judge"] != "PASSES" and relu.nulls["constant@judge"] != "PASSES"
    for name in ("101_ReLU", "203_Gemm_GELU_LayerNorm"):
        audit = audit_problem(builtin_problem(name, "cpu"), judge=judge)
        assert audit.status == "ok", audit.flags
        assert ({k: v for k, v in audit.nulls.items() if k.endswith("@judge")}
                and "PASSES" not in audit.nulls.values())


def test_null_candidates_launch_one_kernel() -> None:
    for code in (constant_candidate((2, 3), 0.5), identity_candidate((2, 3), 0)):
        assert code.count("@triton.jit") == 1 and "_null_kernel[" in code
        compile(code, "<null>", "exec")
