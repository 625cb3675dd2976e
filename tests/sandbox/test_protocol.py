"""The judge<->sandbox messages (sandbox/wire/protocol.py): each class survives a round trip through its
wire form and JSON, and refuses a wire form with a field missing or of the wrong type."""

from __future__ import annotations

import dataclasses
import json
import os

import pytest

from drkernel.sandbox.wire import protocol as P

ITEM = P.OutputItem(file="trial_0.pt", structure={"seq": [{"t": 0}, {"v": 2}]}, subclass=[],
                    dtypes=["torch.float32"], shapes=[[4, 8]], launches=["relu"], forward_s=0.25,
                    aliases_input=False, aliases_param=False, aliases_previous=False, mutated_input=False,
                    threads=0)
ROW = [[[4, 8], "torch.float32", 1.5, 2.0, 0, 0, 0]]
SAMPLES: list[P.Wire] = [
    P.Load(reference_code="x = 1", size_snippet="", reference_hash="ab", init_seed=7, entry_point="Model",
           candidate_path=None),
    P.Load(reference_code="x = 1", size_snippet="N = 4", reference_hash="ab", init_seed=7,
           entry_point="Model", candidate_path="/s/submission.py"),
    P.Run(seeds=[1, 2], tag="trial"),
    P.Modes(seed=3),
    P.BenchPrepare(seed=4, calls=None, warmup=2, warmup_s=0.1, graph=True, compile=False, window_ms=1.0),
    P.BenchRun(seeds=[[1, 2]], wseeds=[[3, 4]]),
    P.Checksums(seeds=[[1, 2]], wseeds=[[3, 4]]),
    P.Profile(seeds=[1], wseeds=[2], timed_window=False),
    P.Profile(seeds=[1, 2], wseeds=[3, 4], timed_window=True),
    P.Peak(),
    P.SealedFill(null=False),
    P.SealedFill(null=True, bare=True),
    P.SealedTake(keep=False),
    P.SealedTake(keep=False, bare=True),
    P.ErrorReply(ok=False, error=P.WireError("forward_error", "boom", None), op_s=0.1),
    P.Hello(device_name="cpu", torch="2.13", triton="3.9", startup_s={"warm_up": 0.2}),
    P.LoadReply(cached=False, flops=None, tampered=["torch.allclose"], threads=1),
    P.RunReply(items=[ITEM], tampered=[]),
    P.ModesReply(modes={"train/grad": 1}, threads=0),
    P.BenchPrepareReply(est_ms=0.01, warmup_calls=10, calls=25, input_bytes=4096, launch_ms=None, graph=False,
                        graph_error="no capture"),
    P.BenchRunReply(window_ms=[0.5], host_ms=[0.6], launches=[25], graph=True, checksums=[ROW]),
    P.ChecksumsReply(checksums=[ROW]),
    P.ProfileReply(kernels={"relu": [3.5, 2.0]}, launches=["relu", "relu"], checksums=ROW),
    P.PeakReply(bandwidth_gbs=4000.0, tflops_fp32=50.0, tflops_bf16=None),
    P.SealedFillReply(filled_at=12.5, fill_ms=0.75),
    P.SealedTakeReply(taken_at=12.75, take_ms=0.0),
]
IDS = [f"{type(m).__name__}{k}" for k, m in enumerate(SAMPLES)]


@pytest.mark.parametrize("message", SAMPLES, ids=IDS)
def test_round_trip_through_json(message: P.Wire) -> None:
    wire = json.loads(json.dumps(message.to_wire()))
    assert type(message).from_wire(wire) == message
    if isinstance(message, P.Request):
        assert wire["op"] == message.OP and P.REQUESTS[message.OP] is type(message)


@pytest.mark.parametrize("message", SAMPLES, ids=IDS)
def test_every_missing_field_is_refused(message: P.Wire) -> None:
    wire = message.to_wire()
    for f in dataclasses.fields(message):  # type: ignore[arg-type]
        broken = {k: v for k, v in wire.items() if k != f.name}
        with pytest.raises(P.ProtocolError, match=f.name):
            type(message).from_wire(broken)


WRONG = {str: 5, int: "5", float: "0.5", bool: 1, list: "x", dict: [1]}


@pytest.mark.parametrize("message", SAMPLES, ids=IDS)
def test_a_field_of_the_wrong_type_is_refused(message: P.Wire) -> None:
    wire = message.to_wire()
    checked = 0
    for f in dataclasses.fields(message):  # type: ignore[arg-type]
        value = getattr(message, f.name)
        if value is None or f.name == "structure":  # None fits its Optional; structure is any JSON
            continue
        bad = WRONG[dict] if isinstance(value, P.Wire) else WRONG[type(value)]
        with pytest.raises(P.ProtocolError):
            type(message).from_wire(wire | {f.name: bad})
        checked += 1
    assert checked or not dataclasses.fields(message)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_a_float_field_is_a_finite_number(bad: float) -> None:
    wire = P.BenchPrepareReply(est_ms=0.01, warmup_calls=10, calls=25, input_bytes=4096, launch_ms=0.02,
                               graph=True, graph_error=None).to_wire()
    for field in ("est_ms", "launch_ms", "op_s"):
        with pytest.raises(P.ProtocolError):
            P.BenchPrepareReply.from_wire(wire | {field: bad})


def test_bool_is_not_a_number_and_a_number_is_not_a_bool() -> None:
    wire = P.Modes(seed=3).to_wire()
    with pytest.raises(P.ProtocolError):
        P.Modes.from_wire(wire | {"seed": True})
    reply = P.BenchRunReply(window_ms=[0.5], host_ms=[0.6], launches=[25], graph=True,
                            checksums=[ROW]).to_wire()
    with pytest.raises(P.ProtocolError):
        P.BenchRunReply.from_wire(reply | {"graph": 1})


@pytest.mark.parametrize("change", [{"window_ms": []}, {"host_ms": [0.6, 0.7]}, {"window_ms": [float("nan")]},
                                    {"window_ms": [-1.0]}, {"checksums": []}, {"launches": [1, 2]}])
def test_a_bench_run_reply_must_have_one_of_each_per_window(change: dict[str, object]) -> None:
    reply = P.BenchRunReply(window_ms=[0.5], host_ms=[0.6], launches=[25], graph=True,
                            checksums=[ROW]).to_wire()
    with pytest.raises(P.ProtocolError):
        P.BenchRunReply.from_wire(reply | change)


def test_profile_kernels_are_pairs_of_time_and_calls() -> None:
    reply = P.ProfileReply(kernels={"k": [1.0, 1.0]}, launches=[], checksums=[]).to_wire()
    for bad in ({"k": [1.0]}, {"k": [float("inf"), 1.0]}, {"k": [-1.0, 1.0]}, {"k": ["1", 1.0]}):
        with pytest.raises(P.ProtocolError):
            P.ProfileReply.from_wire(reply | {"kernels": bad})


def test_parse_reply_picks_the_class_of_the_request() -> None:
    req = P.Modes(seed=1)
    ok = P.ModesReply(modes={"eval/no_grad": 2}, threads=0).to_wire() | {"seq": 9}
    assert P.parse_reply(req, ok) == P.ModesReply(modes={"eval/no_grad": 2}, threads=0)
    err = P.ErrorReply(ok=False, error=P.WireError("forward_error", "x", "tb"), op_s=0.0).to_wire()
    assert isinstance(P.parse_reply(req, err), P.ErrorReply)
    for bad in ({}, {"ok": "yes"}, {"ok": None, "modes": {}}):
        with pytest.raises(P.ProtocolError):
            P.parse_reply(req, bad)


def test_the_pipe_carries_a_typed_message_unchanged() -> None:
    r, w = os.pipe()
    try:
        msg = P.BenchRun(seeds=[[1, 2, 3]], wseeds=[[4, 5, 6]])
        P.write_message(w, msg.to_wire())
        got = P.read_message(r)
        assert P.REQUESTS[got["op"]].from_wire(got) == msg
    finally:
        os.close(r)
        os.close(w)


def test_an_output_item_carries_a_structure_of_flatten_outputs_form() -> None:
    """What harness.flatten_outputs writes passes; anything the comparison could trip on does not."""
    import torch

    from drkernel.sandbox.inside.harness import flatten_outputs

    structure, _ = flatten_outputs((torch.zeros(2), [torch.ones(1), 3, None, "x"], 1.5))
    ok = ITEM.to_wire() | {"structure": structure}
    assert P.OutputItem.from_wire(ok).structure == structure
    deep: dict = {"t": 0}
    for _ in range(100):
        deep = {"seq": [deep]}
    for bad in (5, "t", [], {}, {"t": -1}, {"t": True}, {"t": 0, "v": 1}, {"seq": 5}, {"seq": [{"x": 1}]},
                {"v": [1]}, {"bad": 3}, deep):
        with pytest.raises(P.ProtocolError, match="structure"):
            P.OutputItem.from_wire(ok | {"structure": bad})
    for name in ("../trial_0.pt", "/etc/passwd", "a/b.pt", ".hidden", "", "x" * 200):
        with pytest.raises(P.ProtocolError, match="file"):
            P.OutputItem.from_wire(ok | {"file": name})
