"""`--protocol paper` (the paper's Table 1 setting) next to ours, and the run options around it."""

import argparse
import json

import pytest

from drkernel.agent.cli_options import add_run_options
from drkernel.agent.env import EnvConfig, KernelEnv
from drkernel.agent.loop import LoopConfig, run_episode
from drkernel.agent.policy import SamplingParams, ScriptedPolicy
from drkernel.agent.tts import ContextConfig, ContextManager
from drkernel.cli import main
from drkernel.executors.fake import FakeExecutor, scripted_result
from drkernel.types import EvalOptions, EvalOutcome, Problem, TimingStats
from tests.agent.agent_fixtures import RELU_REF

PROBLEM = Problem(name="p", reference_code=RELU_REF)
MARKS = ["speedup=1.5 coverage=1.0", "speedup=1.6 coverage=0.0", "speedup=1.2 coverage=1.0", "incorrect"]


def answer(msgs):
    turn = sum(m["role"] == "assistant" for m in msgs)
    marks = " ".join(f"# fake: {m}" for m in MARKS[turn % 4].split())
    return f"turn {turn}\n```python\nclass ModelNew: pass\n{marks}\n```"


@pytest.fixture
def suite(tmp_path):
    d = tmp_path / "suite"
    d.mkdir()
    (d / "1_p.py").write_text(RELU_REF)
    return d


def bench(suite, out, url, *extra):
    return main(["bench", str(suite), "--model", "stub", "--base-url", url, "--samples", "1", "--turns", "4",
                 "--context", "top_w", "--window", "2", "--out", str(out), "--executor", "fake",
                 "--no-progress", *extra])


def shown_turns(messages):
    return [m["content"].split("\n", 1)[0] for m in messages if m["role"] == "assistant"]


def test_paper_protocol_end_to_end(chat_server, suite, tmp_path, capsys):
    srv = chat_server(answer)
    assert bench(suite, tmp_path / "paper", srv.base_url, "--protocol", "paper") == 0
    cfg = json.loads((tmp_path / "paper" / "config.json").read_text())
    assert cfg["protocol"] == "paper" and cfg["reward_preset"] == "eval"
    opts = cfg["eval_options"]
    assert (opts["atol"], opts["rtol"], opts["num_perf_trials"], opts["check_relative_error"]) == (
        0.01, 0.01, 10, False)
    assert cfg["context"]["token_budget"] == 20480 and cfg["context"]["overflow"] == "overlong"
    # STTS ranks by the eval reward 0.5*C + 0.5*min(s,3), with no coverage term: turn 2 (1.6x, no
    # Triton time) beats turn 3 (1.2x, all Triton time); our reward (with PR) ranks the other way
    assert shown_turns(srv.requests[3]["messages"]) == ["turn 0", "turn 1"]
    feedback = srv.requests[1]["messages"][-1]["content"]
    assert feedback.startswith("You now have the evaluation server's feedback")
    d = json.loads(feedback[feedback.index("{"): feedback.rindex("}") + 1])
    for key in ("task_id", "status", "compiled", "correctness", "decoy_kernel", "reference_runtime",
                "kernel_runtime", "speedup", "error_message", "error_code", "metadata", "reward", "score",
                "success", "num_custom_kernel", "num_total_kernels",
                "custom_kernel_cuda_time_in_profiling_us", "total_kernel_run_time_in_profiling_us"):
        assert key in d, key
    assert d["correctness"] is True and d["reward"] == pytest.approx(0.5 + 0.5 * 1.5)

    srv2 = chat_server(answer)
    assert bench(suite, tmp_path / "ours", srv2.base_url) == 0
    assert shown_turns(srv2.requests[3]["messages"]) == ["turn 0", "turn 2"]
    assert "Server feedback:" in srv2.requests[1]["messages"][-1]["content"]
    ours = json.loads((tmp_path / "ours" / "config.json").read_text())
    assert (ours["protocol"] == "ours" and ours["reward_preset"] == "paper"
            and ours["eval_options"]["atol"] is None)
    # a resumed run may not switch the ranking's reward
    assert bench(suite, tmp_path / "ours", srv2.base_url, "--resume", "--reward-preset", "eval") == 2
    assert "reward_preset" in capsys.readouterr().err


def test_paper_speedup_is_the_mean_ratio_and_the_reward_follows():
    def timed(request):
        r = scripted_result(request)
        r.reference_timing = TimingStats(median_ms=2.0, mean_ms=3.0, std_ms=0.1, min_ms=1.9, max_ms=9.0, n=10)
        r.kernel_timing = TimingStats(median_ms=1.0, mean_ms=1.2, std_ms=0.1, min_ms=0.9, max_ms=2.0, n=10)
        return r

    opts = EvalOptions.paper(reward_preset="eval")
    env = KernelEnv(PROBLEM, FakeExecutor(timed),
                    EnvConfig(max_turns=1, eval_options=opts, speedup_from="mean"))
    env.reset()
    step = env.step("```python\nclass ModelNew: pass  # fake: speedup=2.0\n```")
    turn = env.trajectory.turns[0]
    assert turn.result.speedup == pytest.approx(2.5)  # 3.0 / 1.2, not the median ratio 2.0
    assert step.reward == turn.reward == pytest.approx(0.5 + 0.5 * 2.5)
    assert turn.result.reference_timing.median_ms == 2.0  # the judge's figures stay


def test_an_overflowing_prompt_is_an_empty_prompt_overlong_turn_that_ends_the_episode():
    long = "x" * 12000  # ~3,000 estimated tokens per answer
    policy = ScriptedPolicy(lambda msgs, i: f"{long}\n```python\n"
                                            "class ModelNew: pass  # fake: speedup=1.3\n```")
    cfg = EnvConfig(max_turns=4, context=ContextConfig(token_budget=3000, overflow="overlong"))
    env = KernelEnv(PROBLEM, FakeExecutor(), cfg)
    traj = run_episode(env, policy, LoopConfig(env=cfg))
    assert len(policy.calls) == 1 and len(traj.turns) == 2  # turn 2 was never sent, and the episode ended
    t = traj.turns[1]
    assert (t.response, t.finish_reason, t.reward, t.result.error.kind) == ("", "prompt_overlong", 0.0,
                                                                            "prompt_overlong")
    assert t.prompt_tokens > 3000 and t.result.outcome is EvalOutcome.COMPILE_ERROR
    assert traj.truncated and not traj.terminated and traj.metadata["stopped"] == "prompt_overlong"
    # ours shrinks the same prompts instead, and every turn is sent
    policy2 = ScriptedPolicy(lambda msgs, i: f"{long}\n```python\nclass ModelNew: pass\n```")
    cfg2 = EnvConfig(max_turns=4, context=ContextConfig(token_budget=3000))
    traj2 = run_episode(KernelEnv(PROBLEM, FakeExecutor(), cfg2), policy2, LoopConfig(env=cfg2))
    assert len(policy2.calls) == 4 and all(t.prompt_tokens <= 3000 for t in traj2.turns)


def test_an_overlong_turn_is_counted_apart_from_a_turn_without_code(tmp_path):
    """A prompt that did not fit the model's context was counted as the model's "no code" (a format
    failure of the model) in the rates, the report's tables and CSV, the outcomes and the feedback."""
    import csv

    from rich.console import Console

    from drkernel.agent.cli_optimize import _turn_line
    from drkernel.agent.feedback import render_feedback
    from drkernel.agent.metrics import summarize
    from drkernel.agent.report import render_table, write_reports

    long = "x" * 12000
    cfg = EnvConfig(max_turns=2, context=ContextConfig(token_budget=3000, overflow="overlong"))
    fits = ScriptedPolicy(lambda msgs, i: f"{long}\n```python\nclass ModelNew: pass\n```")
    overlong = run_episode(KernelEnv(PROBLEM, FakeExecutor(), cfg), fits, LoopConfig(env=cfg))
    prose = ScriptedPolicy(lambda msgs, i: "I would write a kernel here.")
    no_code = run_episode(KernelEnv(PROBLEM, FakeExecutor(), cfg, sample=1), prose, LoopConfig(env=cfg))
    assert overlong.turns[1].finish_reason == "prompt_overlong" and len(no_code.turns) == 2
    row = summarize([overlong, no_code], max_turns=2)["per_turn"][1]
    assert (row["no_code"], row["prompt_overlong"]) == (0.5, 0.5)
    assert row["outcomes"] == {"no_code": 1, "prompt_overlong": 1}
    assert _turn_line(overlong.turns[1])["outcome"] == "prompt_overlong"
    status = render_feedback(overlong.turns[1].result).splitlines()[0]
    assert "(prompt_overlong)" in status and "compile" not in status
    assert status in overlong.turns[1].feedback  # the feedback the trajectory records
    console = Console(record=True, width=80)
    summary = summarize([overlong, no_code], max_turns=2)
    console.print(render_table(summary))
    text = console.export_text()
    assert "overlong" in text and "…" not in text and max(len(line) for line in text.splitlines()) <= 80
    csv_rows = list(csv.DictReader(write_reports(summary, tmp_path / "out")[1].open()))
    assert {"turn": "2", "metric": "prompt_overlong", "p": "", "value": "0.500000"} in csv_rows
    assert {"turn": "2", "metric": "no_code", "p": "", "value": "0.500000"} in csv_rows


def test_paper_context_answers_in_the_room_left_and_gives_up_at_max_model_len_minus_one():
    """The authors' engine: max_tokens = min(max_model_len - prompt, max_tokens); a prompt of
    max_model_len - 1 tokens or more is not sent. Prompt tokens here are characters (count_tokens=len)
    plus 8 per message."""
    answer_chars = 3000
    policy = ScriptedPolicy(lambda msgs, i: "y" * answer_chars + "\n```python\nclass ModelNew: pass\n```")
    first = KernelEnv(PROBLEM, FakeExecutor(), EnvConfig(), count_tokens=len).reset()[1]["prompt_tokens"]
    # turn 1's prompt is far below the context; turn 2's is over the old 'budget' but leaves room
    sampling = SamplingParams(max_tokens=4000)
    cfg = EnvConfig(max_turns=3, context=ContextConfig(token_budget=first + 10, overflow="overlong",
                                                       max_model_len=first + 7000))
    traj = run_episode(KernelEnv(PROBLEM, FakeExecutor(), cfg, count_tokens=len), policy,
                       LoopConfig(env=cfg, sampling=sampling))
    sent = [s.max_tokens for s in policy.samplings]
    second = traj.turns[1].prompt_tokens
    assert second > first + 10  # over token_budget, sent all the same: only max_model_len counts
    assert sent[0] == 4000 and sent[1] == first + 7000 - second < 4000
    assert len(traj.turns) == 3 and traj.turns[2].finish_reason == "prompt_overlong"
    assert traj.turns[2].prompt_tokens >= first + 7000 - 1 and len(policy.calls) == 2
    # the rule's edge, exactly
    cm = ContextManager(ContextConfig(overflow="overlong", token_budget=20480, max_model_len=28672))
    assert (cm.overlong(28670), cm.overlong(28671)) == (False, True)
    assert (cm.room(20480), cm.room(28000)) == (8192, 672)


def test_paper_flags_set_max_model_len_to_the_authors_context(tmp_path):
    from drkernel.agent.cli_options import build_loop_config
    from drkernel.agent.cli_options import max_model_len as flag_len

    parser = argparse.ArgumentParser()
    add_run_options(parser, default_turns=3)
    paper = parser.parse_args(["--model", "m", "--protocol", "paper"])
    assert flag_len(paper) == 20480 + 8192 == build_loop_config(paper, 3).env.context.max_model_len
    assert flag_len(parser.parse_args(["--model", "m"])) is None
    given = parser.parse_args(["--model", "m", "--protocol", "paper", "--max-model-len", "32768"])
    assert build_loop_config(given, 3).env.context.max_model_len == 32768


def test_a_tiny_max_model_len_is_one_line_naming_the_flag(suite, tmp_path, capsys):
    code = main(["bench", str(suite), "--model", "m", "--max-model-len", "10", "--executor", "fake",
                 "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert code == 2 and "--max-model-len: must be >= 64" in err and "Traceback" not in err


def test_help_shows_protocol_tts_ranking_and_reward_presets(capsys):
    with pytest.raises(SystemExit):
        main(["bench", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for needle in ("--protocol {ours,paper}", "--reward-preset {paper,released,eval,correctness_speedup}",
                   "--rank-by {reward,speedup}", "top 4 earlier turns ranked by --rank-by",
                   "0.5*C + 0.5*min(s,3)"):
        assert needle in text, needle


def test_a_budget_without_a_tokenizer_warns(chat_server, suite, tmp_path, capsys):
    srv = chat_server(answer)
    assert bench(suite, tmp_path / "o", srv.base_url, "--prompt-budget", "4000") == 0
    assert "characters / 4 without --tokenizer" in capsys.readouterr().err
    assert bench(suite, tmp_path / "o2", srv.base_url) == 0
    assert "--tokenizer" not in capsys.readouterr().err


def test_unknown_reward_preset_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["bench", "builtin", "--model", "m", "--reward-preset", "fast"])
    assert exc.value.code == 2 and "invalid choice" in capsys.readouterr().err

