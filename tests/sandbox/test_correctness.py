"""compare_outputs and load_tensors on hand-made tensors: structure, dtype, shape, NaN/Inf, tolerances."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch

from drkernel.sandbox.comparison import Tolerance, compare_outputs, default_tolerance, load_tensors
from drkernel.sandbox.inside.harness import flatten_outputs
from drkernel.sandbox.wire.tensorfile import write_tensors


def compare(ref: Any, out: Any, atol: float | None = None,  # type: ignore[no-untyped-def]
            rtol: float | None = None, relative: bool = True):
    rs, rt = flatten_outputs(ref)
    os_, ot = flatten_outputs(out)
    return compare_outputs(rs, rt, os_, ot, atol, rtol, relative)


def ramp(n: int = 64, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.linspace(-3.0, 3.0, n, dtype=torch.float64).to(dtype)


# -- exact and near-exact matches ----------------------------------------------------------------
def test_identical_outputs_pass_with_zero_error() -> None:
    c = compare(ramp(), ramp())
    assert c.passed and c.issue is None
    assert c.max_abs_diff == 0.0 and c.rel_l2 == 0.0


def test_error_within_tolerance_passes_and_reports_the_worst_difference() -> None:
    ref = ramp()
    out = ref.clone()
    out[5] += 1e-4
    c = compare(ref, out)
    assert c.passed
    assert c.max_abs_diff == pytest.approx(1e-4, rel=1e-2)


def test_elementwise_tolerance_atol_plus_rtol_times_reference() -> None:
    ref = torch.full((16,), 100.0) + torch.arange(16.0)
    ok = ref + 0.01 + 0.01 * ref.abs() * 0.9  # inside atol + rtol*|ref| but rel_l2 ~ 1e-2
    assert compare(ref, ok, relative=False).passed
    bad = ref.clone()
    bad[3] += 0.01 + 0.01 * ref[3] * 1.5
    c = compare(ref, bad, relative=False)
    assert not c.passed and "1 of 16 elements" in (c.issue or "")


# -- structure, dtype, shape ---------------------------------------------------------------------
def test_dtype_mismatch_fails_even_with_equal_values() -> None:
    c = compare(ramp(), ramp().double())
    assert not c.passed and "dtype mismatch" in (c.issue or "")


def test_shape_mismatch_fails() -> None:
    c = compare(ramp(64).view(8, 8), ramp(64).view(4, 16))
    assert not c.passed and "shape mismatch" in (c.issue or "")


def test_tensor_where_a_tuple_is_expected_fails() -> None:
    c = compare((ramp(), ramp()), ramp())
    assert not c.passed and "structure" in (c.issue or "")


def test_tuple_with_a_missing_element_fails() -> None:
    c = compare((ramp(), ramp(8)), (ramp(),))
    assert not c.passed and "structure" in (c.issue or "")


def test_nested_tuples_compare_every_leaf() -> None:
    ref = (ramp(), (ramp(8) * 2, [ramp(4) + 1, ramp(4)]))
    assert compare(ref, tuple(ref)).passed
    bad = (ramp(), (ramp(8) * 2, [ramp(4) + 1, ramp(4) + 0.5]))
    c = compare(ref, bad)
    assert not c.passed and "elements" in (c.issue or "")


def test_list_and_tuple_layouts_are_the_same_structure() -> None:
    assert compare([ramp(), ramp(8)], (ramp(), ramp(8))).passed


def test_none_where_a_tensor_is_expected_fails() -> None:
    c = compare(ramp(), None)
    assert not c.passed and "structure" in (c.issue or "")


def test_python_scalars_in_the_structure_must_match() -> None:
    assert compare((ramp(), 3), (ramp(), 3)).passed
    assert not compare((ramp(), 3), (ramp(), 4)).passed
    assert compare((ramp(), 0.5), (ramp(), 0.50000001)).passed


def test_integer_outputs_must_be_exactly_equal() -> None:
    ref = torch.arange(10)
    assert compare(ref, ref.clone()).passed
    bad = ref.clone()
    bad[0] += 1
    c = compare(ref, bad, atol=10.0, rtol=10.0)
    assert not c.passed and "integer" in (c.issue or "")


def test_bool_outputs_must_be_exactly_equal() -> None:
    ref = torch.tensor([True, False, True])
    assert not compare(ref, ~ref).passed


# -- NaN and Inf ---------------------------------------------------------------------------------
def test_nan_in_the_same_positions_passes() -> None:
    ref = ramp()
    ref[[3, 9]] = math.nan
    assert compare(ref, ref.clone()).passed


def test_nan_in_different_positions_fails() -> None:
    ref = ramp()
    ref[3] = math.nan
    out = ramp()
    out[4] = math.nan
    c = compare(ref, out)
    assert not c.passed and "NaN" in (c.issue or "")


def test_nan_where_the_reference_is_finite_fails() -> None:
    out = ramp()
    out[0] = math.nan
    assert not compare(ramp(), out).passed


def test_all_nan_output_fails() -> None:
    assert not compare(ramp(), torch.full((64,), math.nan)).passed


def test_inf_sign_and_position_must_match() -> None:
    ref = ramp()
    ref[2] = math.inf
    ref[7] = -math.inf
    assert compare(ref, ref.clone()).passed
    flipped = ref.clone()
    flipped[2] = -math.inf
    c = compare(ref, flipped)
    assert not c.passed and "Inf" in (c.issue or "")
    finite = ref.clone()
    finite[7] = -1e30
    assert not compare(ref, finite).passed


# -- constant and zero outputs -------------------------------------------------------------------
def test_constant_output_fails_against_a_varying_reference_even_inside_atol() -> None:
    ref = torch.tanh(ramp()) * 1e-4  # every element within atol=1e-2 of zero
    c = compare(ref, torch.zeros_like(ref), atol=1e-2, rtol=1e-2, relative=False)
    assert not c.passed and "constant" in (c.issue or "")


def test_constant_mean_output_fails() -> None:
    ref = torch.tanh(ramp()) * 1e-4 + 5.0
    c = compare(ref, torch.full_like(ref, float(ref.mean())), atol=1e-2, rtol=1e-2, relative=False)
    assert not c.passed and "constant" in (c.issue or "")


def test_constant_output_passes_a_constant_reference() -> None:
    ref = torch.full((32,), 2.5)
    assert compare(ref, ref.clone()).passed
    assert compare(torch.zeros(32), torch.zeros(32)).passed


def test_single_element_outputs_are_not_held_to_the_constant_rule() -> None:
    assert compare(torch.tensor(2.0), torch.tensor(2.0)).passed


# -- relative L2 ---------------------------------------------------------------------------------
def test_relative_l2_catches_a_scaled_down_tiny_output() -> None:
    ref = torch.tanh(ramp()) * 1e-4
    c = compare(ref, ref * 0.5)
    assert not c.passed and "relative L2" in (c.issue or "")
    assert c.rel_l2 == pytest.approx(0.5, rel=1e-6)
    assert compare(ref, ref * 0.5, relative=False).passed  # the paper's elementwise check alone


def test_relative_l2_separates_fp32_from_a_bf16_downcast() -> None:
    torch.manual_seed(0)
    a, b = torch.randn(32, 128), torch.randn(128, 48)
    ref = a @ b
    tf32_like = (a.half().float() @ b.half().float())  # 10-bit mantissa operands, as TF32
    bf16 = (a.bfloat16().float() @ b.bfloat16().float())
    assert compare(ref, tf32_like).passed
    c = compare(ref, bf16)
    assert not c.passed and c.rel_l2 is not None and c.rel_l2 > 1e-3


def test_relative_check_can_be_switched_off() -> None:
    ref = ramp() + 10.0
    out = ref * 1.005
    assert not compare(ref, out).passed
    assert compare(ref, out, relative=False).passed


def test_zero_reference_with_nonzero_output_has_infinite_rel_l2_and_fails_on_atol() -> None:
    c = compare(torch.zeros(8), torch.full((8,), 0.5))
    assert not c.passed


# -- tolerances per dtype ------------------------------------------------------------------------
def test_default_tolerances_follow_the_dtype() -> None:
    assert default_tolerance(torch.float32, None, None, True) == Tolerance(1e-2, 1e-2, 1e-3,
                                                                           scaled_floor=True)
    assert default_tolerance(torch.float64, None, None, True).atol < 1e-4
    assert default_tolerance(torch.bfloat16, None, None, True).rel_l2 == pytest.approx(2e-2)
    assert default_tolerance(torch.float16, None, None, False).rel_l2 is None
    assert default_tolerance(torch.int64, None, None, True) == Tolerance(0.0, 0.0, None)


def test_explicit_tolerances_override_the_defaults() -> None:
    tol = default_tolerance(torch.float32, 1e-5, 1e-6, True)
    assert (tol.atol, tol.rtol) == (1e-5, 1e-6)
    ref = ramp()
    assert not compare(ref, ref + 1e-3, atol=1e-5, rtol=1e-6).passed


def test_float64_is_held_to_a_tight_bound() -> None:
    ref = ramp(dtype=torch.float64)
    assert not compare(ref, ref + 1e-4).passed
    assert compare(ref, ref + 1e-9).passed


def test_half_precision_reference_accepts_half_precision_rounding() -> None:
    ref = ramp(dtype=torch.float16)
    out = (ref.float() * (1 + 2e-4)).half()
    assert compare(ref, out).passed


# -- the first failing leaf decides --------------------------------------------------------------
def test_worst_leaf_is_reported() -> None:
    ref = (ramp(), ramp() + 5)
    out = (ramp() + 1e-4, ramp() + 5 + 3e-4)
    c = compare(ref, out)
    assert c.passed and c.max_abs_diff == pytest.approx(3e-4, rel=1e-2)


# -- load_tensors: plain tensors only ------------------------------------------------------------
def test_load_tensors_reads_a_list_of_plain_tensors(tmp_path: Path) -> None:
    path = tmp_path / "out.bin"
    write_tensors(str(path), [ramp(), torch.arange(3)])
    got = load_tensors(str(path), 2)
    assert torch.equal(got[0], ramp()) and got[1].tolist() == [0, 1, 2]


def test_load_tensors_rejects_a_wrong_count(tmp_path: Path) -> None:
    path = tmp_path / "out.bin"
    write_tensors(str(path), [ramp()])
    with pytest.raises(ValueError, match="announced"):
        load_tensors(str(path), 2)


def test_load_tensors_gives_plain_tensors_whatever_was_written(tmp_path: Path) -> None:
    path = tmp_path / "out.bin"
    write_tensors(str(path), [torch.nn.Parameter(ramp())])
    (got,) = load_tensors(str(path), 1)
    assert type(got) is torch.Tensor and torch.equal(got, ramp())


class _Payload:
    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (print, ("unpickled arbitrary code",))


def test_load_tensors_never_unpickles_anything(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "out.pt"
    torch.save([_Payload()], path)
    with pytest.raises(ValueError, match="not a tensor file"):
        load_tensors(str(path), 1)
    assert "unpickled" not in capsys.readouterr().out
