"""Issue 13 / 19: a candidate that rewrites its sandbox's replies (gate off) cannot turn a malformed
reply into the judge's own failure. Each reply is read through the typed classes of
sandbox/wire/protocol.py; a missing field or one of the wrong type is the candidate's runtime_error
(protocol), never an infra_error (which training masks and the pool retries), and never a pass."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from drkernel.sandbox.judge import Judge
from drkernel.types import EvalOutcome, EvalRequest
from tests.sandbox.corpus import ASSETS, FAST, reference_code

TEMPLATE = (ASSETS / "attacks" / "malformed_reply.py").read_text()

CASES = [  # op, key, value ("DROP": the field removed)
    ("run", "items", "DROP"),
    ("run", "launches", "DROP"),
    ("run", "launches", "'relu_scale_kernel'"),
    ("run", "threads", "'many'"),
    ("run", "dtypes", "DROP"),
    ("run", "file", "None"),
    ("modes", "modes", "DROP"),
    ("modes", "modes", "{'train/grad': 'x'}"),
    ("bench_prepare", "calls", "DROP"),
    ("bench_run", "window_ms", "DROP"),
    ("bench_run", "window_ms", "['0.001']"),
    ("bench_run", "window_ms", "[]"),
    ("bench_run", "host_ms", "None"),
    ("bench_run", "launches", "DROP"),
    ("bench_run", "checksums", "{}"),
    ("bench_run", "tampered", "'nothing'"),
    # numbers that are not numbers: a NaN in a result makes its JSON invalid for every strict reader
    ("run", "forward_s", "float('inf')"),
    ("bench_prepare", "launch_ms", "float('nan')"),
    ("bench_prepare", "est_ms", "float('-inf')"),
    # an output structure the comparison cannot read would fail inside the judge: an infra_error
    ("run", "structure", "5"),
    ("run", "structure", "{'seq': 5}"),
    ("run", "structure", "{'seq': [{'t': 0}], 'v': 1}"),
    ("run", "structure", "{'t': 'zero'}"),
]


@pytest.fixture(scope="module")
def judge() -> Iterator[Judge]:
    with Judge(device="cpu", cache_path=None, spares=1) as j:
        yield j


@pytest.mark.parametrize(("op", "key", "value"), CASES, ids=[f"{o}.{k}={v}" for o, k, v in CASES])
def test_a_malformed_candidate_reply_is_the_candidates_failure(judge: Judge, op: str, key: str,
                                                               value: str) -> None:
    code = TEMPLATE.replace("__OP__", op).replace("__KEY__", key).replace("__VALUE__", value)
    opts = FAST.replace(num_correct_trials=2, num_perf_trials=3, static_policy=False)
    r = judge.evaluate(EvalRequest(reference_code=reference_code("relu_scale"), kernel_code=code,
                                   options=opts))
    assert r.outcome in (EvalOutcome.RUNTIME_ERROR, EvalOutcome.HACK_DETECTED), (r.outcome, r.error,
                                                                                 r.hack_details)
    assert r.reward == 0.0 and not r.correct
    json.dumps(r.to_dict(), allow_nan=False)  # the verdict is still strict JSON
    if r.outcome is EvalOutcome.RUNTIME_ERROR:
        assert r.error is not None and r.error.kind == "protocol", r.error


def test_a_reply_nested_past_the_parsers_depth_is_a_protocol_error() -> None:
    """JSON nested 100,000 deep makes Python's parser raise RecursionError, not ValueError."""
    import os

    from drkernel.sandbox.wire.protocol import ProtocolError, read_message

    r, w = os.pipe()
    try:
        body = ("[" * 100_000 + "]" * 100_000).encode()
        os.write(w, len(body).to_bytes(8, "little"))
        data = body
        while data:  # the pipe holds 64 KiB: a writer thread keeps it fed
            import threading

            t = threading.Thread(target=lambda d=data: os.write(w, d))
            t.start()
            with pytest.raises(ProtocolError):
                read_message(r)
            t.join()
            data = b""
    finally:
        os.close(r)
        os.close(w)


def test_the_template_unchanged_is_honest(judge: Judge) -> None:
    """The attack's kernel is honest: with a corruption that changes nothing, it passes."""
    code = TEMPLATE.replace("__OP__", "bench_run").replace("__KEY__", "unused_field").replace(
        "__VALUE__", "1")
    opts = FAST.replace(num_correct_trials=2, num_perf_trials=3, static_policy=False)
    r = judge.evaluate(EvalRequest(reference_code=reference_code("relu_scale"), kernel_code=code,
                                   options=opts))
    assert r.outcome is EvalOutcome.OK, (r.outcome, r.error, r.hack_details)


def test_a_reference_error_forged_by_the_candidates_sandbox_is_the_candidates_failure(judge: Judge) -> None:
    """Only the reference's own sandbox can report a reference failure (infra_error)."""
    code = (ASSETS / "attacks" / "forged_reference_error.py").read_text()
    opts = FAST.replace(num_correct_trials=2, num_perf_trials=3, static_policy=False)
    r = judge.evaluate(EvalRequest(reference_code=reference_code("relu_scale"), kernel_code=code,
                                   options=opts))
    assert r.outcome is EvalOutcome.RUNTIME_ERROR, (r.outcome, r.error)
    assert r.error is not None and r.error.kind == "reference_error" and r.reward == 0.0
    assert "submission's sandbox" in r.error.message


@pytest.mark.parametrize("name", ["ABS", "../ABS_NAME", "trial_1.pt"],
                         ids=["absolute", "up_and_over", "another_call"])
def test_an_output_file_named_by_the_candidate_is_never_read_or_removed_elsewhere(judge: Judge, tmp_path,
                                                                                  name: str) -> None:
    """The judge reads each call's output file and removes it after the comparison. A sandbox that
    names another path for it (an absolute path, a way up and out of its folder, another call's file)
    must get neither: the judge would read the reference's outputs there, or delete a file of the
    host as root. The file's name is the judge's, `{tag}_{k}.pt`; any other is a protocol failure."""
    canary = tmp_path / "canary.pt"
    canary.write_bytes(b"keep me")
    forged = {"ABS": str(canary), "../ABS_NAME": "../../../../../../.." + str(canary)}.get(name, name)
    code = TEMPLATE.replace("__OP__", "run").replace("__KEY__", "file").replace("__VALUE__", repr(forged))
    opts = FAST.replace(num_correct_trials=2, num_perf_trials=3, static_policy=False)
    r = judge.evaluate(EvalRequest(reference_code=reference_code("relu_scale"), kernel_code=code,
                                   options=opts))
    assert canary.read_bytes() == b"keep me"
    assert r.outcome is EvalOutcome.RUNTIME_ERROR and r.error is not None and r.error.kind == "protocol", (
        r.outcome, r.error)
    assert r.reward == 0.0


@pytest.mark.parametrize(("key", "value"), [("subclass", "['x' * 100_000] * 40"),
                                            ("launches", "['k' * 1000] * 4000")],
                         ids=["subclass_evidence", "launch_names"])
def test_a_reply_cannot_bloat_the_verdict(judge: Judge, key: str, value: str) -> None:
    """Strings a sandbox reports (evidence, kernel names) reach the result bounded: a 16 MB reply must
    not become a 16 MB verdict in every store, log and HTTP answer downstream."""
    code = TEMPLATE.replace("__OP__", "run").replace("__KEY__", key).replace("__VALUE__", value)
    opts = FAST.replace(num_correct_trials=2, num_perf_trials=3, static_policy=False)
    r = judge.evaluate(EvalRequest(reference_code=reference_code("relu_scale"), kernel_code=code,
                                   options=opts))
    assert r.reward == 0.0 or key == "launches", (r.outcome, r.hack_details)
    assert len(json.dumps(r.to_dict())) < 100_000, {k: len(str(v)) for k, v in r.to_dict().items()}
