"""Held-out shapes derived from a reference's size constants (bench --held-out on suites without any)."""

from __future__ import annotations

import pytest
import torch

from drkernel.problems.heldout import derive_shape_variants, with_derived_shape_variants
from drkernel.problems.reference import load_reference
from drkernel.problems.suite import builtin_names, builtin_problem, with_size
from drkernel.types import Problem

CONV = """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, bias_shape):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.bias = nn.Parameter(torch.randn(bias_shape))

    def forward(self, x):
        return torch.relu(self.conv(x)) + self.bias


batch_size = 128
in_channels = 3
out_channels = 64
height, width = 32, 32
kernel_size = 3
bias_shape = (out_channels, 1, 1)


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, bias_shape]
"""


def test_batch_and_halved_variants_with_derived_assignments_replayed() -> None:
    batch, halved = derive_shape_variants(CONV)
    assert batch == "batch_size = 65\nbias_shape = (out_channels, 1, 1)"
    assert halved == "batch_size = 64\nout_channels = 32\nbias_shape = (out_channels, 1, 1)"
    problem = Problem(name="conv", reference_code=CONV)
    for snippet, shape, channels in ((batch, (65, 3, 32, 32), 64), (halved, (64, 3, 32, 32), 32)):
        ref = load_reference(with_size(problem, snippet))
        [x] = ref.inputs(seed=0)
        assert tuple(x.shape) == shape
        model = ref.build(init_seed=0)
        assert model.bias.shape == (channels, 1, 1)  # the replayed bias_shape follows out_channels
        assert model(x).shape[1] == channels


def test_nothing_to_derive_without_size_constants() -> None:
    assert derive_shape_variants("import torch\ndef get_inputs():\n    return [torch.randn(64, 256)]\n") == ()
    assert derive_shape_variants("def broken(:\n") == ()
    assert derive_shape_variants("batch_size = 1\n") == ("batch_size = 3",)  # odd and different


def test_own_shapes_are_kept_and_derived_ones_are_marked() -> None:
    own = Problem(name="p", reference_code=CONV, shape_variants=("batch_size = 7",))
    assert with_derived_shape_variants(own) is own
    derived = with_derived_shape_variants(Problem(name="p", reference_code=CONV))
    assert len(derived.shape_variants) == 2 and derived.metadata["shape_variants"] == "derived"
    bare = Problem(name="q", reference_code="x = 1.5")
    assert with_derived_shape_variants(bare) is bare


def _shapes(ref: object, inputs: list[object]) -> tuple[list[tuple[int, ...]], list[tuple[int, ...]]]:
    model = ref.build(init_seed=0)  # type: ignore[attr-defined]
    with torch.no_grad():
        out = model(*inputs)
    params = [tuple(p.shape) for p in model.parameters()]
    tensors = [tuple(t.shape) for t in [*inputs, out] if isinstance(t, torch.Tensor)]
    return tensors, params


@pytest.mark.parametrize("name", builtin_names())
def test_derived_shapes_of_every_builtin_reference_build_and_run(name: str) -> None:
    """At CPU size, each derived variant of each built-in reference builds, runs, and changes a shape."""
    problem = builtin_problem(name, "cpu")
    base = load_reference(problem)
    before = _shapes(base, base.inputs(seed=0))
    variants = derive_shape_variants(problem.reference_code)
    assert variants, name
    for snippet in variants:
        ref = load_reference(with_size(problem, snippet))
        assert _shapes(ref, ref.inputs(seed=0)) != before, (name, snippet)
