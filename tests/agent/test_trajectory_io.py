import json

import pytest

from drkernel.agent.trajectories import (
    Trajectory,
    Turn,
    append_jsonl,
    iter_jsonl,
    load_trajectories,
    rl_rows,
    save_trajectories,
)
from drkernel.errors import ConfigError
from drkernel.types import DeviceInfo, EvalOutcome, EvalResult, TrialReport


def make(sample=0):
    res = EvalResult(
        outcome=EvalOutcome.OK, compiled=True, correct=True, speedup=1.4, reward=2.4,
        device=DeviceInfo(kind="cpu", name="cpu", interpreter=True),
        trials=[TrialReport(seed=1, passed=True)],
    )
    bad = EvalResult.failure(EvalOutcome.COMPILE_ERROR, "no_code", "none")
    turns = [
        Turn(0, "no code", None, "none", bad, 0.0, "FEEDBACK-0", context=[], prompt_tokens=100),
        Turn(1, "```python\nA\n```", "A\n", "last_fence", res, 2.4, "FEEDBACK-1", context=[0],
             prompt_tokens=150, logprobs=[-0.1, -0.3], tokens=["```", "A"]),
        Turn(2, "```python\nB\n```", "B\n", "last_fence", res, 2.4, "FEEDBACK-2", context=[1],
             prompt_tokens=140),
    ]
    return Trajectory(problem="relu", sample=sample, prompt=[{"role": "user", "content": "TASK"}],
                      turns=turns, model="m", level=1, truncated=True)


def test_chat_messages_for_sft():
    msgs = make().messages
    assert [m["role"] for m in msgs] == ["user", "assistant", "user", "assistant", "user", "assistant"]
    assert msgs[2]["content"] == "FEEDBACK-0" and msgs[-1]["content"].startswith("```python\nB")


def test_rl_rows_rebuild_each_turn_prompt_from_its_context():
    rows = rl_rows(make())
    assert [r["reward"] for r in rows] == [0.0, 2.4, 2.4]
    assert rows[1]["logprobs"] == [-0.1, -0.3]
    assert [m["content"] for m in rows[2]["prompt"]] == ["TASK", "```python\nA\n```", "FEEDBACK-1"]
    assert rows[2]["last_turn"] and not rows[0]["last_turn"]


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_roundtrip(tmp_path, suffix):
    if suffix == ".parquet":
        pytest.importorskip("pyarrow")
    path = tmp_path / f"t{suffix}"
    save_trajectories(path, [make(0), make(1)])
    back = load_trajectories(path)
    assert [t.to_dict() for t in back] == [make(0).to_dict(), make(1).to_dict()]
    assert back[0].turns[1].result.device.interpreter is True


def test_jsonl_record_fields(tmp_path):
    path = tmp_path / "t.jsonl"
    save_trajectories(path, [make()])
    d = json.loads(path.read_text())
    assert d["uid"] == "relu#0" and d["rewards"] == [0.0, 2.4, 2.4]
    assert d["turns"][1]["result"]["outcome"] == "ok" and d["messages"][0]["role"] == "user"


def test_append_and_torn_last_line(tmp_path, caplog):
    path = tmp_path / "log.jsonl"
    append_jsonl(path, make(0))
    append_jsonl(path, make(1))
    with open(path, "a") as f:
        f.write('{"uid": "relu#2", "problem": "re')  # killed mid-write
    assert [t.sample for t in iter_jsonl(path)] == [0, 1]
    assert "skipping" in caplog.text


def test_a_torn_last_line_cut_inside_a_character_is_skipped_too(tmp_path, caplog):
    """Episodes are written with ensure_ascii=False: a write killed inside a multi-byte character left
    bytes that are not UTF-8, and reading the log back (bench --resume, drkernel report) was a
    UnicodeDecodeError traceback instead of the skipped torn line."""
    path = tmp_path / "log.jsonl"
    append_jsonl(path, make(0))
    with open(path, "ab") as f:
        f.write('{"uid": "relu#1", "problem": "éé'.encode()[:-1])  # killed inside the last é
    assert [t.sample for t in iter_jsonl(path)] == [0]
    assert "skipping" in caplog.text


def test_unknown_format(tmp_path):
    with pytest.raises(ConfigError):
        save_trajectories(tmp_path / "t.csv", [make()])


def test_best_turn_passes_over_a_speedup_that_is_no_number():
    """A correct turn whose speedup is NaN (read back from JSON) won best_turn against a later 1.4x one,
    and optimize kept it as best_kernel.py: a NaN compared as neither less nor more."""
    import dataclasses

    traj = make()
    traj.turns[1].result = dataclasses.replace(traj.turns[1].result, speedup=float("nan"))
    assert traj.best_turn() is traj.turns[2]
