"""Held-out shapes derived from a reference's own size constants, for problems that carry none.

KernelBench files define their sizes as module-level integer constants (`batch_size = 16`,
`dim = 16384`) read by get_inputs() and get_init_inputs(). Two variants are derived from them:

- `batch`: the batch constant (a name containing "batch") set to an odd value, about half the
  original (16 -> 9). Almost every model accepts another batch size; a kernel whose grid or strides
  assume the one batch it was shown does not.
- `halved`: every constant >= 32 halved (16384 -> 8192), with derived assignments such as
  `bias_shape = (out_channels, 1, 1)` replayed after them. Kernel sizes, strides, heads and other
  small constants are left alone.

Both are smaller than the original, so they cost less than the timed shape, except the batch of a tiny
batch: 1 and 2 become 3, and 3 becomes 5 (an odd batch other than the one shown). A variant the reference
cannot run (a size that must stay divisible by something, say) is not counted by the judge.
"""

from __future__ import annotations

from dataclasses import replace

from drkernel.problems.nulls import derived_assignments, int_constants
from drkernel.types import Problem

__all__ = ["derive_shape_variants", "with_derived_shape_variants"]


def _batch_variant(sizes: dict[str, int]) -> dict[str, int]:
    for name, value in sizes.items():
        if "batch" in name.lower() and value >= 1:
            new = value // 2 + 1
            if new % 2 == 0:
                new += 1
            return {name: new if new != value else value + 2}
    return {}


def derive_shape_variants(reference_code: str, floor: int = 16) -> tuple[str, ...]:
    """Size snippets for a reference: the `batch` and `halved` variants that change something.

    >>> derive_shape_variants("batch_size = 16\\ndim = 16384\\nkernel_size = 3\\n")
    ('batch_size = 9', 'dim = 8192')
    >>> derive_shape_variants("x = 1.5")
    ()
    """
    try:
        sizes = int_constants(reference_code)
        derived = derived_assignments(reference_code)
    except SyntaxError:
        return ()
    variants: list[str] = []
    for changed in (_batch_variant(sizes), {k: v // 2 for k, v in sizes.items() if v >= 2 * floor}):
        if not changed:
            continue
        snippet = "\n".join([*(f"{k} = {v}" for k, v in changed.items()), *derived])
        if snippet not in variants:
            variants.append(snippet)
    return tuple(variants)


def with_derived_shape_variants(problem: Problem) -> Problem:
    """The problem unchanged if it carries held-out shapes; else with derived ones (maybe none)."""
    if problem.shape_variants:
        return problem
    variants = derive_shape_variants(problem.reference_code)
    if not variants:
        return problem
    return replace(problem, shape_variants=variants,
                   metadata={**problem.metadata, "shape_variants": "derived"})
