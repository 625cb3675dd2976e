import pytest

from drkernel.agent.trajectories import Turn
from drkernel.agent.tts import ContextConfig, ContextManager, select_turns
from drkernel.errors import ConfigError
from drkernel.types import EvalOutcome, EvalResult

PROMPT = [{"role": "user", "content": "TASK " * 100}]


def turn(i, reward, speedup=None, response=None, feedback=None):
    ok = reward > 0
    res = EvalResult(outcome=EvalOutcome.OK if ok else EvalOutcome.INCORRECT, correct=ok, speedup=speedup)
    code = f"class ModelNew: v{i}"
    return Turn(
        index=i,
        response=response if response is not None else "reasoning " * 200 + f"```python\n{code}\n```",
        code=code,
        extraction="last_fence",
        result=res,
        reward=reward,
        feedback=feedback if feedback is not None else f"feedback {i} " + "f" * 400,
    )


def test_top_w_vs_best_window_vs_full():
    ts = [turn(i, r) for i, r in enumerate([2.0, 0.0, 0.0, 3.0, 0.0, 2.5, 0.0, 1.0])]
    assert select_turns(ts, ContextConfig(mode="top_w", w=4)) == [0, 3, 5, 7]
    # windows of 4: sums 5, 3, 5.5, 5.5, 3.5 -> the later of the tied best
    assert select_turns(ts, ContextConfig(mode="best_window", w=4)) == [3, 4, 5, 6]
    assert select_turns(ts, ContextConfig(mode="full")) == list(range(8))
    assert select_turns(ts[:3], ContextConfig(mode="top_w", w=4)) == [0, 1, 2]


def test_ties_prefer_recent_and_keep_last_option():
    ts = [turn(i, 0.0) for i in range(6)]
    assert select_turns(ts, ContextConfig(mode="top_w", w=4)) == [2, 3, 4, 5]
    ts = [turn(i, r) for i, r in enumerate([3, 3, 3, 3, 0])]
    assert select_turns(ts, ContextConfig(mode="top_w", w=4)) == [0, 1, 2, 3]
    assert select_turns(ts, ContextConfig(mode="top_w", w=4, keep_last=True)) == [1, 2, 3, 4]


def test_rank_by_speedup_ignores_incorrect():
    ts = [turn(0, 1.5, speedup=1.5), turn(1, 0.0, speedup=9.0), turn(2, 1.2, speedup=1.2)]
    assert select_turns(ts, ContextConfig(mode="top_w", w=2, rank_by="speedup")) == [0, 2]


def test_prompt_messages_are_chronological_pairs():
    ts = [turn(i, r) for i, r in enumerate([1.0, 0.0, 2.0, 0.0, 3.0, 0.0])]
    cm = ContextManager(ContextConfig(mode="top_w", w=3))
    msgs, kept, size = cm.build(PROMPT, ts)
    assert kept == [0, 2, 4]
    assert [m["role"] for m in msgs] == ["user", "assistant", "user"] * 1 + ["assistant", "user"] * 2
    assert "feedback 0" in msgs[2]["content"] and "feedback 4" in msgs[-1]["content"]
    assert size == cm.measure(msgs)
    full_msgs, full_kept, _ = ContextManager().build(PROMPT, ts)
    assert full_kept is None and len(full_msgs) == 1 + 2 * 6


@pytest.mark.parametrize("mode", ["top_w", "best_window", "full"])
def test_prompt_stays_within_budget_for_many_turns(mode):
    budget = 1500
    cm = ContextManager(ContextConfig(mode=mode, w=4, token_budget=budget))
    ts = []
    sizes = []
    for i in range(30):
        _, kept, size = cm.build(PROMPT, ts)
        sizes.append(size)
        assert size <= budget
        ts.append(turn(i, float(i % 5), response="r" * (400 * (i % 7)) + "```python\nx\n```"))
    assert max(sizes) > 200  # turns are in the context, not dropped wholesale


def test_shrink_compacts_to_code_then_drops_weakest():
    ts = [turn(0, 3.0), turn(1, 1.0), turn(2, 2.0)]
    cm = ContextManager(ContextConfig(mode="top_w", w=4, token_budget=500))
    msgs, kept, size = cm.build(PROMPT, ts)
    assert size <= 500
    assert 0 in kept and 1 not in kept  # the weakest went first
    assert all("reasoning" not in m["content"] for m in msgs if m["role"] == "assistant")


def test_single_huge_turn_is_cut_to_fit():
    ts = [turn(0, 3.0, response="z" * 40_000, feedback="q" * 40_000)]
    cm = ContextManager(ContextConfig(mode="top_w", token_budget=2000), count_tokens=len)
    msgs, kept, size = cm.build(PROMPT, ts)
    assert size <= 2000 and kept == [0] and "[... cut ...]" in msgs[-1]["content"]


def test_token_counter_is_used():
    calls = []

    def count(text):
        calls.append(text)
        return len(text.split())

    cm = ContextManager(ContextConfig(), count_tokens=count)
    _, _, size = cm.build([{"role": "user", "content": "a b c"}], [])
    assert calls == ["a b c"] and size == 3 + 8


def test_config_validation():
    with pytest.raises(ConfigError):
        ContextConfig(mode="everything")
    with pytest.raises(ConfigError):
        ContextConfig(w=0)
    with pytest.raises(ConfigError):
        ContextConfig(token_budget=10)
    assert ContextConfig.paper_stts().w == 4


def test_a_speedup_that_is_no_number_ranks_as_not_measured():
    """A correct turn whose speedup is NaN (read back from JSON) ranked as anything: a NaN in the sort
    keys left top_w's order to chance, and it kept the NaN turn over the 1.5x one."""
    ts = [turn(i, 1.0, speedup=s) for i, s in enumerate([2.0, float("nan"), 1.5, 1.8, 1.1])]
    assert select_turns(ts, ContextConfig(mode="top_w", w=3, rank_by="speedup")) == [0, 2, 3]
    assert select_turns(ts, ContextConfig(mode="best_window", w=2, rank_by="speedup")) == [2, 3]
