"""Feedback names the hack class and what to do; it never teaches the defences. No seed, input
scale, threshold, call index or evidence text of a result may appear in any text sent to a policy."""

import re
from pathlib import Path

import pytest

from drkernel.agent.feedback import HACK_ADVICE, FeedbackConfig, render_feedback
from drkernel.types import DeviceInfo, EvalOutcome, EvalResult, TimingStats, TrialReport

DOCS = Path(__file__).resolve().parents[2] / "docs" / "errors.md"
STYLES = [FeedbackConfig(), FeedbackConfig(style="json"), FeedbackConfig(style="json", max_chars=100_000),
          FeedbackConfig(style="paper")]


def documented_hack_codes() -> list[str]:
    text = DOCS.read_text().split("## Hack codes", 1)[1].split("\n\n", 2)[2]
    rows = [ln for ln in text.splitlines() if ln.startswith("| `")]
    return [c for ln in rows for c in re.findall(r"`([a-z_]+)`", ln.split("|")[1])]


SEEDS = [1804289383, 846930886, 1681692777]
SCALES = ["0.0371", "7.25"]
# evidence written the way the judge writes it: seeds, scales, thresholds, call indices
EVIDENCE = [
    f"trial with seed {SEEDS[0]} launched no Triton kernel of the submission",
    f"timed call 17 (fresh inputs, scale {SCALES[0]}) returned a wrong output",
    "host clock with a device-wide sync shows 0.913 ms per call more than the CUDA events"
    " (limit 0.1 ms + 50 %)",
    "in-sandbox median 0.0123 ms is far below the judge's 0.5321 ms per call",
    f"back-to-back window launched 3 kernels in 41 calls; scale {SCALES[1]}",
    "static: gc.get_objects at line 12",
]


def hacked_result(codes: list[str]) -> EvalResult:
    timing = TimingStats(median_ms=0.2, mean_ms=0.21, std_ms=0.01, min_ms=0.19, max_ms=0.3, n=10,
                         host_median_ms=0.9133, external_ms_per_call=0.5321)
    return EvalResult(
        outcome=EvalOutcome.HACK_DETECTED, compiled=True, hacks=list(codes),
        hack_details={c: EVIDENCE[i % len(EVIDENCE)] for i, c in enumerate(codes)},
        trials=[TrialReport(seed=s, passed=False, max_abs_diff=0.25, issue="Output mismatch") for s in SEEDS],
        kernel_timing=timing, reference_timing=timing, reference_ms=0.4, kernel_ms=0.2,
        device=DeviceInfo(kind="cpu", name="cpu", interpreter=True),
        stage_s={"static": 0.01, "correctness": 1.5, "shape_variants": 2.25},
        shape_variants_passed=0, shape_variants_total=2, shape_variant_issues=["variant 1: batch_size = 9"],
    )


def secrets(r: EvalResult) -> list[str]:
    out = [str(t.seed) for t in r.trials] + list(r.hack_details.values()) + SCALES
    out += ["seed", "scale", "timed call", "limit 0.1", "50 %", "0.9133", "0.5321", "host_median",
            "external_ms", "stage_s", "shape_variants", "variant", "batch_size"]
    return out


def assert_no_leak(text: str, r: EvalResult) -> None:
    for s in secrets(r):
        assert s not in text, f"{s!r} leaked into the feedback"


def test_every_documented_hack_code_has_advice():
    codes = documented_hack_codes()
    assert len(codes) >= 20 and "decoy_kernel" in codes and "output_aliases_previous" in codes
    assert sorted(set(codes) - set(HACK_ADVICE)) == []


@pytest.mark.parametrize("cfg", STYLES, ids=["text", "json", "json-unbounded", "paper"])
def test_no_mechanism_reaches_the_policy(cfg):
    codes = documented_hack_codes()
    for k in range(len(codes)):  # each code alone, then all of them at once
        r = hacked_result([codes[k]])
        text = render_feedback(r, cfg)
        assert codes[k] in text and HACK_ADVICE[codes[k]][:40] in text
        assert_no_leak(text, r)
    r = hacked_result(codes)
    assert_no_leak(render_feedback(r, cfg), r)


def test_an_unknown_hack_code_gets_the_generic_advice():
    r = hacked_result(["brand_new_check"])
    text = render_feedback(r)
    assert "brand_new_check" in text and "reward hacking" in text
    assert_no_leak(text, r)


def test_judge_machinery_errors_are_not_described():
    r = EvalResult.failure(EvalOutcome.RUNTIME_ERROR, "protocol",
                           "reply without the op's unguessable tag 9f2c")
    for cfg in STYLES:
        text = render_feedback(r, cfg)
        assert "protocol" in text and "unguessable" not in text and "9f2c" not in text


@pytest.fixture(scope="module")
def cpu_judge():
    from drkernel.sandbox.judge import Judge

    with Judge(device="cpu", cache_path=None) as j:
        yield j


@pytest.mark.parametrize("name", ["a2_decoy_never_launched", "c7_checked_then_cheap",
                                  "b10_shared_output_buffer"])
def test_real_judge_evidence_stays_in_the_result(cpu_judge, name):
    from drkernel.types import EvalRequest
    from tests.sandbox.corpus import asset

    hack = asset("hacks", name)
    r = cpu_judge.evaluate(EvalRequest(reference_code=hack.reference, kernel_code=hack.code,
                                       options=hack.options()))
    assert r.hacks and all(r.hack_details.get(c) for c in r.hacks), (r.outcome, r.hack_details)
    for cfg in STYLES:
        text = render_feedback(r, cfg)
        for s in [str(t.seed) for t in r.trials] + list(r.hack_details.values()):
            assert s not in text, (name, s)
        for number in re.findall(r"\d+(?:\.\d+)?", " ".join(r.hack_details.values())):
            if len(number) >= 3:  # seeds, scales, thresholds, call counts of the evidence
                assert not re.search(rf"(?<![\d.]){re.escape(number)}(?![\d.])", text), (name, number)
        assert "stage_s" not in text
