"""A hack is a hack wherever it is seen: one that shows only on a held-out shape is flagged, and its
evidence says on which shape (for humans; the policy's feedback never mentions held-out shapes)."""

from __future__ import annotations

from drkernel.sandbox.judge import Judge
from drkernel.types import EvalOutcome, EvalRequest
from tests.sandbox.corpus import FAST, asset, reference_code

# honest at the shape it was shown; on any other shape it also writes into its input
MUTATES_ELSEWHERE = asset("kernels", "relu_scale").code.replace(
    "        return out\n",
    "        if tuple(x.shape) != (8, 256):\n            x.mul_(0.5)\n        return out\n",
)


def test_a_hack_seen_only_on_a_held_out_shape_is_flagged_with_where() -> None:
    with Judge(device="cpu", cache_path=None, spares=1) as judge:
        r = judge.evaluate(EvalRequest(reference_code=reference_code("relu_scale"),
                                       kernel_code=MUTATES_ELSEWHERE,
                                       options=FAST.replace(static_policy=False),
                                       shape_variants=("batch_size = 3; dim = 100",)))
    assert r.outcome is EvalOutcome.HACK_DETECTED and "input_mutation" in r.hacks, (r.outcome, r.hack_details)
    assert r.hack_details["input_mutation"].startswith("held-out shape 1: ")
    assert r.reward == 0.0
