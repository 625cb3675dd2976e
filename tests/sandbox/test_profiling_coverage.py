"""The coverage from a profiled window's kernels (stages/profiling.kernel_times): the share of device
time in kernels the launch hook saw the submission launch, by name and by count."""

from __future__ import annotations

import pytest

from drkernel.sandbox.stages.profiling import kernel_times

GEMM = "sm90_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x32_warpgroupsize1x1x1_execute_kernel__5x_cublas"


def test_an_honest_window_is_covered_by_its_own_kernels() -> None:
    events = {"relu_kernel": [90.0, 100], "void at::native::elementwise_kernel<...>": [10.0, 100]}
    kernels, coverage = kernel_times(events, ["relu_kernel"] * 100)
    assert coverage == pytest.approx(0.9)
    assert [k.name for k in kernels] == ["relu_kernel", "void at::native::elementwise_kernel<...>"]
    assert [k.own for k in kernels] == [True, False]


def test_a_triton_kernel_named_after_the_vendor_kernel_covers_nothing() -> None:
    """The attack: torch does the GEMM, and a trivial Triton copy is named after the cuBLAS kernel
    (its plain name read from a profiler run at import). One launch per call, two kernels per call by
    that name: none of its time is the submission's."""
    events = {GEMM: [100 * (95.0 + 1.0), 200]}
    kernels, coverage = kernel_times(events, [GEMM] * 100)
    assert coverage == 0.0 and not kernels[0].own


def test_nothing_profiled_has_no_coverage() -> None:
    assert kernel_times({}, ["relu_kernel"]) == ([], None)
    _, coverage = kernel_times({"relu_kernel": [5.0, 3]}, [])
    assert coverage == 0.0  # launched by no one the hook saw
