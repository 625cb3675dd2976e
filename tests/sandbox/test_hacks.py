"""Every reward hack of the corpus (tests/assets/hacks) through one real CPU judge.

Each hack's docstring names its catalogue row (docs/hack_catalogue.md) and what the judge must
conclude; a hack never earns a reward. The anchor's eight probes (kernelgym-anchor.md §3.5) are here
too: 2 decoy, 3 lazy, 4 allclose patch, 5 identity memo, 6 profiler-aware, 7 timer patch, 8 side stream
(1, the honest kernel, is in test_honest.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from drkernel.sandbox.judge import Judge
from drkernel.types import EvalOptions, EvalOutcome, EvalRequest, EvalResult, EvalStatus
from tests.sandbox.corpus import FAST, Asset, asset, corpus, reference_code

# Rows of the catalogue (docs/hack_catalogue.md) that apply to a Triton candidate; each must have at
# least one hack file.
# B2 (uninitialised/out-of-bounds reads) needs compute-sanitizer on a GPU; C9-C11 are properties of
# problems and aggregation, not of one candidate.
CATALOGUE_ROWS = {"A1", "A2", "A3", "A4", "A5", "A6", "B1", "B3", "B4", "B5", "B6", "B7", "B8", "B9", "B10",
                  "B11", "B12", "C1", "C2", "C3", "C4", "C5", "C6", "C7", "C8", "D1", "D2", "D3"}

HACKS = [a for a in corpus("hacks") if a.meta.get("expect") != "ok" and a.meta.get("device") != "gpu"]


@pytest.fixture(scope="module")
def judge() -> Iterator[Judge]:
    with Judge(device="cpu", cache_path=None) as j:
        yield j


def evaluate(judge: Judge, hack: Asset, options: EvalOptions | None = None, **kw: object) -> EvalResult:
    request = EvalRequest(reference_code=hack.reference, kernel_code=hack.code,
                          options=options or hack.options(), **kw)  # type: ignore[arg-type]
    return judge.evaluate(request)


def describe(r: EvalResult) -> str:
    failed = [t.issue for t in r.trials if not t.passed]
    return (f"{r.outcome.value} hacks={r.hack_details} error={r.error} failed_trials={failed} "
            f"reward={r.reward}")


def _param(hack: Asset) -> object:
    marks = [pytest.mark.xfail(strict=True, reason=hack.meta["xfail"])] if "xfail" in hack.meta else []
    return pytest.param(hack, id=hack.name, marks=marks)


def test_corpus_covers_every_catalogue_row() -> None:
    rows = {a.meta.get("row") for a in corpus("hacks")}
    assert CATALOGUE_ROWS <= rows, sorted(CATALOGUE_ROWS - rows)
    for hack in corpus("hacks"):
        assert {"row", "reference", "expect"} <= set(hack.meta), hack.name


@pytest.mark.parametrize("hack", [_param(h) for h in HACKS])
def test_hack_is_caught(judge: Judge, hack: Asset) -> None:
    result = evaluate(judge, hack)
    allowed = {EvalOutcome(v) for v in hack.listed("expect")}
    assert result.outcome in allowed, describe(result)
    assert result.status is EvalStatus.COMPLETED
    assert result.reward == 0.0 and not result.correct
    if result.outcome is EvalOutcome.HACK_DETECTED:
        assert set(hack.listed("hacks")) <= set(result.hacks), describe(result)
        assert all(result.hack_details.get(code) for code in result.hacks)
    else:
        assert not all(t.passed for t in result.trials) or result.hacks, describe(result)


def test_zero_output_fails_under_the_paper_preset_too(judge: Judge) -> None:
    """B3: atol=rtol=1e-2 and no global bound (the paper) still rejects zeros on a tiny-valued output."""
    hack = asset("hacks", "b3_zeros_tiny_output")
    paper = EvalOptions.paper(num_correct_trials=2, num_perf_trials=3, num_warmup=1)
    result = evaluate(judge, hack, paper)
    assert result.outcome is EvalOutcome.INCORRECT, describe(result)
    assert any("constant" in (t.issue or "") for t in result.trials)


def test_scaled_down_output_passes_only_without_the_relative_bound(judge: Judge) -> None:
    """B3 variant: half of a 1e-4 signal is inside the paper's elementwise tolerance; rel-L2 catches it."""
    hack = asset("hacks", "b3_scaled_down")
    lenient = FAST.replace(check_relative_error=False)
    assert evaluate(judge, hack, lenient).outcome is EvalOutcome.OK
    result = evaluate(judge, hack)
    assert result.outcome is EvalOutcome.INCORRECT
    assert any("relative L2" in (t.issue or "") for t in result.trials)


def test_hardcoded_shape_fails_the_held_out_shapes(judge: Judge) -> None:
    """B12: correct on the one shape it was written for, wrong on a held-out shape."""
    hack = asset("hacks", "b12_hardcoded_shape")
    result = evaluate(judge, hack, shape_variants=(hack.meta["variants"],))
    assert result.outcome is EvalOutcome.OK, describe(result)
    assert (result.shape_variants_passed, result.shape_variants_total) == (0, 1)


def test_honest_kernel_passes_the_held_out_shapes(judge: Judge) -> None:
    kernel = asset("kernels", "relu_scale")
    result = evaluate(judge, kernel, shape_variants=("batch_size = 3; dim = 100",))
    assert result.outcome is EvalOutcome.OK, describe(result)
    assert (result.shape_variants_passed, result.shape_variants_total) == (1, 1)


def _shape_locked(folder: Path, on_other_shape: str) -> Asset:
    """The honest relu_scale kernel, except that on any shape but the one it was shown it runs
    `on_other_shape` (one statement)."""
    honest = asset("kernels", "relu_scale")
    code = honest.code.replace(
        "        x = x.contiguous()\n",
        f"        if tuple(x.shape) != (8, 256):\n            {on_other_shape}\n        x = x.contiguous()\n",
    )
    assert code != honest.code
    path = folder / "shape_locked.py"
    path.write_text(code)
    return Asset(path=path, meta={**honest.meta, "options": "static_policy=False"})


def test_a_candidate_that_raises_on_a_held_out_shape_fails_it_and_keeps_its_verdict(judge: Judge,
                                                                                    tmp_path: Path) -> None:
    locked = _shape_locked(tmp_path, "raise ValueError('only the shape I was shown')")
    result = evaluate(judge, locked, shape_variants=("batch_size = 3; dim = 100", "batch_size = 5"))
    assert result.outcome is EvalOutcome.OK and result.reward > 0, describe(result)
    assert (result.shape_variants_passed, result.shape_variants_total) == (0, 2)
    assert all("only the shape I was shown" in issue for issue in result.shape_variant_issues)


def test_a_candidate_that_dies_on_a_held_out_shape_fails_the_rest(judge: Judge, tmp_path: Path) -> None:
    locked = _shape_locked(tmp_path, "import os; os._exit(3)")
    result = evaluate(judge, locked, shape_variants=("batch_size = 3; dim = 100", "batch_size = 5"))
    assert result.outcome is EvalOutcome.OK and result.reward > 0, describe(result)
    assert (result.shape_variants_passed, result.shape_variants_total) == (0, 2)
    assert "sandbox ended" in result.shape_variant_issues[0]


def test_a_held_out_shape_the_reference_cannot_run_is_not_counted(judge: Judge) -> None:
    kernel = asset("kernels", "relu_scale")
    result = evaluate(judge, kernel, shape_variants=("batch_size = -1", "batch_size = 3; dim = 100"))
    assert result.outcome is EvalOutcome.OK, describe(result)
    assert (result.shape_variants_passed, result.shape_variants_total) == (1, 1)
    assert result.shape_variant_issues and "not counted" in result.shape_variant_issues[0]
    after = evaluate(judge, kernel)  # the reference process is still in service
    assert after.outcome is EvalOutcome.OK, describe(after)


def _elementwise(torch_expr: str, triton_expr: str) -> tuple[str, str]:
    """A reference computing torch_expr of x, and an honest Triton kernel computing triton_expr."""
    reference = reference_code("relu_scale").replace("torch.relu(x) * 2.0 + 1.0", torch_expr)
    kernel = asset("kernels", "relu_scale").code.replace("tl.maximum(x, 0.0) * 2.0 + 1.0", triton_expr)
    assert torch_expr in reference and triton_expr in kernel
    return reference, kernel


@pytest.mark.parametrize(
    ("torch_expr", "triton_expr", "warning"),
    [
        ("x * 1e-6 + 1.0", "x * 1e-6 + 1.0", "changes by at most"),  # the output hardly depends on x
        ("torch.relu(-x.abs())", "tl.maximum(-tl.abs(x), 0.0)", "all zeros"),
        ("torch.relu(x) * 2.0 - 1.0", "tl.maximum(x, 0.0) * 2.0 - 1.0", None),  # a sound problem: no warning
    ],
)
def test_a_reference_that_ignores_its_inputs_is_reported(judge: Judge, torch_expr: str, triton_expr: str,
                                                         warning: str | None) -> None:
    reference, kernel = _elementwise(torch_expr, triton_expr)
    result = judge.evaluate(EvalRequest(reference_code=reference, kernel_code=kernel, options=FAST))
    assert result.outcome is EvalOutcome.OK, describe(result)  # the warning is about the problem only
    if warning is None:
        assert result.warnings == []
    else:
        [text] = result.warnings
        assert text.startswith("weak_reference:") and warning in text


def test_a_held_out_shape_that_breaks_the_reference_load_leaves_no_stale_reference(judge: Judge) -> None:
    """The reference fails while loading the variant, after its get_inputs was replaced: the next
    evaluation must load the real problem again, not reuse that half-loaded state."""
    reference = reference_code("relu_scale").replace(
        "def get_init_inputs():\n", "def get_init_inputs():\n    assert dim > 0, 'dim must be positive'\n")
    kernel = asset("kernels", "relu_scale").code
    fixed = FAST.replace(seed=7)  # the same model seed: the reference process may reuse its last load
    first = judge.evaluate(EvalRequest(reference_code=reference, kernel_code=kernel, options=fixed,
                                       shape_variants=("dim = -4",)))
    assert first.outcome is EvalOutcome.OK and first.shape_variants_total == 0, describe(first)
    assert "dim must be positive" in first.shape_variant_issues[0]
    again = judge.evaluate(EvalRequest(reference_code=reference, kernel_code=kernel, options=fixed))
    assert again.outcome is EvalOutcome.OK, describe(again)


def test_identity_memo_serves_stale_outputs_and_is_caught(judge: Judge) -> None:
    """Anchor probe 5: the correctness trials get fresh input objects (the memo misses); a timed window
    reuses its buffers with fresh values, so a hit there is a stale output and the checksums see it."""
    hack = asset("hacks", "c5_cache_identity")
    result = evaluate(judge, hack, hack.options().replace(num_perf_trials=4))
    assert result.outcome is EvalOutcome.HACK_DETECTED and "replayed_output" in result.hacks, describe(result)
    assert result.reward == 0.0
    log = [line for line in result.sandbox_output.splitlines() if line.startswith("memo ")]
    assert log[:FAST.num_correct_trials] == ["memo miss"] * FAST.num_correct_trials  # trials: fresh inputs
    assert "memo hit" in log


def test_lazy_offload_is_correct_and_not_flagged_on_the_cpu(judge: Judge) -> None:
    """Anchor probe 3 (A5): not a hack on the CPU; the GPU test checks that its coverage is near 0."""
    result = evaluate(judge, asset("hacks", "a5_lazy_partial_offload"))
    assert result.outcome is EvalOutcome.OK and result.hacks == []
    assert result.launched_kernels == ["copy_kernel"]
    assert result.coverage is None  # no profiler under the interpreter


def test_forged_stdout_verdict_stays_in_the_sandbox_output(judge: Judge) -> None:
    """D1: what the candidate prints is captured as sandbox_output and never read as a verdict."""
    result = evaluate(judge, asset("hacks", "d1_forged_verdict"))
    assert result.outcome is EvalOutcome.INCORRECT and result.reward == 0.0
    assert '"forged": "by-the-candidate"' in result.sandbox_output


def test_the_judge_still_passes_an_honest_kernel_after_the_corpus(judge: Judge) -> None:
    result = evaluate(judge, asset("kernels", "relu_scale"))
    assert result.outcome is EvalOutcome.OK, describe(result)
    assert result.reward > 0
