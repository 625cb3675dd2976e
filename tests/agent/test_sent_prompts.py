"""Saved trajectories record exactly what was sent: a stub OpenAI-compatible server keeps every
request, and the prompts rebuilt from episodes.jsonl (rl_rows) must match them byte for byte, with
and without a token budget that shrinks the prompts."""

import json
from collections import Counter

import pytest

from drkernel.agent.trajectories import load_trajectories, rl_rows
from drkernel.cli import main
from tests.agent.agent_fixtures import RELU_REF

PROSE = "Let me reason about memory traffic, tiling and the launch grid once more. " * 40  # ~2,900 chars


def answer(msgs):
    turn = sum(m["role"] == "assistant" for m in msgs)
    mark = ["incorrect", "speedup=1.3", "speedup=0.9", "speedup=2.2", "speedup=1.1"][turn % 5]
    return f"{PROSE}\nturn {turn}\n```python\nclass ModelNew: pass  # fake: {mark}\n```\n{PROSE}"


@pytest.fixture
def suite(tmp_path):
    d = tmp_path / "suite"
    d.mkdir()
    for i in range(2):
        (d / f"{i + 1}_p.py").write_text(RELU_REF.replace("relu", f"relu  # {i}"))
    return d


@pytest.mark.parametrize(("context", "budget"),
                         [("top_w", None), ("top_w", 1100), ("full", None), ("full", 1100)])
def test_saved_prompts_are_the_requests_byte_for_byte(chat_server, suite, tmp_path, context, budget):
    srv = chat_server(answer)
    out = tmp_path / "out"
    extra = ["--prompt-budget", str(budget)] if budget else []
    argv = ["bench", str(suite), "--model", "stub", "--base-url", srv.base_url, "--samples", "2",
            "--turns", "6", "--context", context, "--window", "3", "--out", str(out), "--executor", "fake",
            "--no-progress", "--concurrency", "2", *extra]
    assert main(argv) == 0
    sent = Counter(json.dumps(r["messages"], ensure_ascii=False) for r in srv.requests)
    trajs = load_trajectories(out / "episodes.jsonl")
    rows = [row for t in trajs for row in rl_rows(t)]
    saved = Counter(json.dumps(r["prompt"], ensure_ascii=False) for r in rows)
    assert len(srv.requests) == len(rows) == 2 * 2 * 6
    assert saved == sent
    edited = [t for tr in trajs for t in tr.turns if t.prompt_edits]
    records = [json.loads(x) for x in (out / "episodes.jsonl").read_text().splitlines()]
    # SFT: the conversation is exact only when nothing was cut
    for tr, rec in zip(trajs, records, strict=True):
        assert rec["messages_exact"] is (context == "full" and budget is None)
        if rec["messages_exact"]:
            assert rec["messages"] == rl_rows(tr)[-1]["prompt"] + [{"role": "assistant",
                                                                   "content": tr.turns[-1].response}]
    if budget is None:
        assert not edited
    else:  # the budget did rewrite prompts (answers cut to their code, or cut): the test bites
        assert len(edited) >= 8
        assert all(t.prompt_tokens <= budget for tr in trajs for t in tr.turns)
