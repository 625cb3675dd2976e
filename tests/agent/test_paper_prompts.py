"""`--protocol paper` asks in the user's words: the first turn is the data's own prompt (the authors' parquet
`prompt`), the later turns a template from `--prompt-template`; drkernel's words only where neither is
given, and then config.json's `paper_differences` says so. The template texts here are made up."""

import json

import pytest

from drkernel.agent.prompts import PromptConfig, later_turn_prompt, load_prompt_template
from drkernel.cli import main
from drkernel.errors import ConfigError, ProblemError
from drkernel.problems.loaders import problem_from_record
from tests.agent.agent_fixtures import RELU_REF

OWN_PROMPT = [{"role": "user", "content": "DATA PROMPT: rewrite this Model in Triton.\n" + RELU_REF}]
TEMPLATE = "JUDGE SAID:\n{feedback}\nNow write {entry_point}New again; a dict is {{'k': 1}}.\n"
# the authors' prompt config layout (per_turn_prompts, an entry named tool_response), our own words
YAML = """method: system
prompt: null
per_turn_prompts:
  - name: first_turn
    condition: "current_turn == 0"
    template: null
  - name: tool_response
    condition: "make_up_tool_response == True"
    template: |
      JUDGE SAID:
      {feedback}
      Now write {entry_point}New again; a dict is {{'k': 1}}.
"""


def answer(msgs):
    return "```python\nclass ModelNew: pass  # fake: speedup=1.3\n```"


@pytest.fixture
def suite(tmp_path):
    path = tmp_path / "suite.jsonl"
    rows = [{"name": "own", "reference_code": RELU_REF, "prompt": OWN_PROMPT},
            {"name": "plain", "reference_code": RELU_REF}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def bench(suite, out, url, *extra):
    return main(["bench", str(suite), "--model", "stub", "--base-url", url, "--samples", "1", "--turns", "2",
                 "--out", str(out), "--executor", "fake", "--no-progress", "--concurrency", "1", *extra])


def first_messages(srv, name_in_prompt):
    return next(r["messages"] for r in srv.requests if len(r["messages"]) == 1
                and name_in_prompt in r["messages"][0]["content"])


def test_paper_asks_the_datas_own_prompt_then_the_users_template(chat_server, suite, tmp_path, capsys):
    template = tmp_path / "multi_turn.yaml"
    template.write_text(YAML)
    srv = chat_server(answer)
    assert bench(suite, tmp_path / "o", srv.base_url, "--protocol", "paper", "--prompt-template",
                 str(template)) == 0
    assert first_messages(srv, "DATA PROMPT") == OWN_PROMPT  # byte for byte, nothing of ours added
    later = next(r["messages"] for r in srv.requests if r["messages"][0] == OWN_PROMPT[0]
                 and len(r["messages"]) == 3)[-1]["content"]
    feedback = later[len("JUDGE SAID:\n"): later.index("\nNow write")]
    assert later == TEMPLATE.format(feedback=feedback, entry_point="Model")
    assert later.endswith("ModelNew again; a dict is {'k': 1}.\n") and json.loads(feedback)["correctness"]
    cfg = json.loads((tmp_path / "o" / "config.json").read_text())
    diffs = cfg["paper_differences"]
    # the problem without a prompt of its own was asked in drkernel's words, and the run says so
    assert any(d.startswith("first-turn prompt: 1 of 2 problem(s)") for d in diffs)
    assert not any(d.startswith("later-turn prompt") for d in diffs)
    assert any(d.startswith("timing:") for d in diffs) and not any("avg_difference" in d for d in diffs)
    assert any(d.startswith("code extraction: of several complete code blocks") for d in diffs)
    assert cfg["prompt_template"] == str(template)
    firsts = [r["messages"] for r in srv.requests if len(r["messages"]) == 1]
    plain = next(m for m in firsts if m != OWN_PROMPT)
    assert "DATA PROMPT" not in plain[0]["content"] and "@triton.jit" in plain[0]["content"]
    capsys.readouterr()
    # a resumed run may not change the words it asks in
    assert bench(suite, tmp_path / "o", srv.base_url, "--protocol", "paper", "--resume") == 2
    assert "prompt_template" in capsys.readouterr().err


def test_without_a_template_paper_uses_our_words_and_says_so(chat_server, suite, tmp_path, capsys):
    srv = chat_server(answer)
    assert bench(suite, tmp_path / "o", srv.base_url, "--protocol", "paper") == 0
    diffs = json.loads((tmp_path / "o" / "config.json").read_text())["paper_differences"]
    assert any(d.startswith("later-turn prompt: drkernel's words") for d in diffs)
    assert f"differs from the authors' evaluation in {len(diffs)} ways" in capsys.readouterr().err
    # ours never takes the data's prompt, and lists no differences
    srv2 = chat_server(answer)
    assert bench(suite, tmp_path / "ours", srv2.base_url) == 0
    assert not any(r["messages"][0]["content"].startswith("DATA PROMPT") for r in srv2.requests)
    assert "paper_differences" not in json.loads((tmp_path / "ours" / "config.json").read_text())
    assert "authors' evaluation" not in capsys.readouterr().err


@pytest.mark.parametrize("text, says", [
    ("no placeholder at all\n", "no {feedback} placeholder"),
    ("{feedback} and {reference}\n", "unknown placeholder {reference}"),
    ("{feedback!r}\n", "unknown placeholder {feedback!r}"),
    ("{feedback} then a lone { brace\n", "not a template"),
    ("per_turn_prompts:\n  - name: first_turn\n    template: null\n", "no per_turn_prompts entry named"),
    ("per_turn_prompts: [unclosed\n", "not YAML"),
    ("per_turn_prompts: 3\n", "no per_turn_prompts entry named"),
    ("per_turn_prompts:\n  tool_response: {template: '{feedback}'}\n", "no per_turn_prompts entry named"),
])
def test_a_bad_template_file_is_one_line_and_exit_2(tmp_path, capsys, suite, text, says):
    path = tmp_path / ("t.yaml" if text.startswith("per_turn") else "t.txt")
    path.write_text(text)
    with pytest.raises(ConfigError, match="--prompt-template"):
        load_prompt_template(str(path))
    code = main(["bench", str(suite), "--model", "m", "--executor", "fake", "--protocol", "paper",
                 "--prompt-template", str(path), "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert code == 2 and says in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "o").exists()  # refused before any work


def test_a_missing_template_file_is_one_line(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        load_prompt_template(str(tmp_path / "nope.txt"))


def test_a_text_template_fills_as_a_format_string(tmp_path):
    path = tmp_path / "t.txt"
    path.write_text(TEMPLATE)
    t = PromptConfig(template_file=str(path)).build()
    text = later_turn_prompt('{"a": {feedback}}', "Net", t)
    assert text == 'JUDGE SAID:\n{"a": {feedback}}\nNow write NetNew again; a dict is {\'k\': 1}.\n'


def test_a_rows_prompt_becomes_chat_messages():
    row = {"name": "r", "reference_code": RELU_REF}
    assert problem_from_record({**row, "prompt": "plain text"}, "x").metadata["prompt"] == [
        {"role": "user", "content": "plain text"}]
    p = problem_from_record({**row, "prompt": [{"role": "user", "content": "c", "extra": 1}]}, "x")
    assert p.metadata["prompt"] == [{"role": "user", "content": "c"}]
    assert "prompt" not in problem_from_record(row, "x").metadata
    ends_on_answer = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]
    for bad in ([{"role": "user"}], [], ends_on_answer):
        with pytest.raises(ProblemError, match="x: 'prompt'"):
            problem_from_record({**row, "prompt": bad}, "x")


def test_optimize_under_paper_reports_its_differences(tmp_path):
    import argparse

    from drkernel.agent.cli_optimize import optimize
    from drkernel.agent.cli_options import add_run_options, build_loop_config
    from drkernel.agent.policy import ScriptedPolicy
    from drkernel.executors.fake import FakeExecutor
    from drkernel.types import Problem

    parser = argparse.ArgumentParser()
    add_run_options(parser, default_turns=1)
    args = parser.parse_args(["--model", "m", "--protocol", "paper", "--turns", "1"])
    optimize(Problem(name="p", reference_code=RELU_REF), ScriptedPolicy([answer([])]), FakeExecutor(),
             build_loop_config(args, 1), tmp_path)
    diffs = json.loads((tmp_path / "report.json").read_text())["paper_differences"]
    assert diffs[0].startswith("first-turn prompt: 1 of 1 problem(s)") and len(diffs) >= 6
