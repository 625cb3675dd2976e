"""Ctrl-C during `drkernel optimize` keeps the turns already judged: their report, trajectory and best
kernel are written before the command exits 130 (they were all lost: nothing was written). An episode
that the model server ended early exits 1 (it exited 0)."""

from __future__ import annotations

import json

from drkernel.agent import cli_optimize
from drkernel.agent.policy import ScriptedPolicy
from drkernel.cli import INTERRUPTED, main
from drkernel.executors.fake import FakeExecutor
from tests.agent.agent_fixtures import RELU_REF

KERNEL = "```python\nclass ModelNew:\n    pass  # fake: speedup={s}\n```"


def test_ctrl_c_keeps_the_turns_judged_so_far(monkeypatch, tmp_path, capsys):
    def answer(messages, call):
        if call == 2:
            raise KeyboardInterrupt
        return KERNEL.format(s=[3.0, 1.5][call])

    monkeypatch.setattr(cli_optimize, "start_policy_and_executor",
                        lambda args: (ScriptedPolicy(answer), FakeExecutor()))
    ref = tmp_path / "relu.py"
    ref.write_text(RELU_REF)
    out = tmp_path / "run"
    code = main(["optimize", str(ref), "--model", "m", "--executor", "fake", "--turns", "5",
                 "--out", str(out)])
    assert code == INTERRUPTED
    report = json.loads((out / "report.json").read_text())
    assert [t["speedup"] for t in report["turns"]] == [3.0, 1.5]
    assert report["best_turn"] == 1 and report["error"] == "interrupted"
    assert "speedup=3.0" in (out / "best_kernel.py").read_text()
    assert len((out / "trajectory.jsonl").read_text().splitlines()) == 1
    assert str(out) in capsys.readouterr().err


def test_an_episode_ended_by_a_failing_model_server_exits_1(chat_server, tmp_path, capsys):
    srv = chat_server(lambda messages: "unused", fail_next=1000, fail_status=400)
    ref = tmp_path / "relu.py"
    ref.write_text(RELU_REF)
    out = tmp_path / "run"
    code = main(["optimize", str(ref), "--model", "stub", "--base-url", srv.base_url, "--executor", "fake",
                 "--turns", "2", "--out", str(out)])
    report = json.loads((out / "report.json").read_text())
    assert code == 1 and report["turns"] == [] and report["error"].startswith("PolicyError")
    assert "ended early" in capsys.readouterr().err
