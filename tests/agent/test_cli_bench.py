"""`drkernel bench` and `drkernel optimize` plumbing with the fake executor: resume, usage errors."""

import json

import pytest

from drkernel.agent.cli_bench import run_bench
from drkernel.agent.env import EnvConfig
from drkernel.agent.loop import LoopConfig
from drkernel.agent.policy import ScriptedPolicy
from drkernel.agent.trajectories import load_trajectories
from drkernel.cli import main
from drkernel.errors import ConfigError
from drkernel.executors.build import build_executor, client_executor_config
from drkernel.executors.fake import FakeExecutor
from drkernel.problems.loaders import load_suite
from tests.agent.agent_fixtures import RELU_REF


def fake_answer(msgs):
    turn = sum(m["role"] == "assistant" for m in msgs)
    marks = ["incorrect", "speedup=1.3", "speedup=2.2"]
    return f"```python\nclass ModelNew: pass  # fake: {marks[turn % 3]}\n```"


@pytest.fixture
def suite(tmp_path):
    d = tmp_path / "suite"
    d.mkdir()
    for i in range(3):
        (d / f"{i + 1}_p.py").write_text(RELU_REF.replace("relu", f"relu  # {i}"))
    (d / "README.py").write_text("not a problem")  # skipped with a warning
    return d


def bench_argv(suite, out, url, *extra):
    return ["bench", str(suite), "--model", "stub", "--base-url", url, "--samples", "2", "--turns", "3",
            "--out", str(out), "--executor", "fake", "--no-progress", *extra]


def test_bench_resume_reruns_only_unfinished_episodes(chat_server, suite, tmp_path, capsys):
    srv = chat_server(fake_answer)
    out = tmp_path / "out"
    assert main(bench_argv(suite, out, srv.base_url)) == 0
    assert len(srv.requests) == 3 * 2 * 3
    first = json.loads((out / "summary.json").read_text())
    assert first["per_turn"][2]["fast_p"]["2"] == 1.0 and first["per_turn"][0]["correct"] == 0.0
    # an interrupted run: the last two episodes never finished, the last write was torn
    log = out / "episodes.jsonl"
    lines = log.read_text().splitlines()
    log.write_text("\n".join(lines[:4]) + "\n" + lines[4][:50])
    assert main(bench_argv(suite, out, srv.base_url)) == 2  # refuses to mix runs without --resume
    assert "--resume" in capsys.readouterr().err
    assert main(bench_argv(suite, out, srv.base_url, "--resume")) == 0
    assert len(srv.requests) == 18 + 2 * 3
    again = json.loads((out / "summary.json").read_text())
    assert again["per_turn"] == first["per_turn"]
    uids = [json.loads(x)["uid"] for x in log.read_text().splitlines()]  # the log is clean again
    assert sorted(uids) == sorted(f"{i}_p#{s}" for i in (1, 2, 3) for s in (0, 1))
    # a changed setting is not a resume
    assert main(bench_argv(suite, out, srv.base_url, "--resume", "--turns", "4")) == 2


@pytest.mark.parametrize("change, key", [
    (["--temperature", "0.3"], "sampling"),
    (["--max-tokens", "100"], "sampling"),
    (["--paper-tolerance"], "eval_options.atol"),
    # these were not compared: a resume mixed timings, timeouts or feedback of two settings in one run
    (["--perf-trials", "7"], "eval_options.num_perf_trials"),
    (["--eval-timeout", "30"], "eval_options.timeout_s"),
    (["--feedback-chars", "500"], "feedback_chars"),
])
def test_a_resume_that_samples_or_judges_otherwise_is_refused(chat_server, suite, tmp_path, capsys, change,
                                                              key):
    srv = chat_server(fake_answer)
    out = tmp_path / "out"
    assert main([*bench_argv(suite, out, srv.base_url), "--limit", "1"]) == 0
    lines = (out / "episodes.jsonl").read_text().splitlines()
    (out / "episodes.jsonl").write_text(lines[0] + "\n")  # one episode left to run
    before = (out / "config.json").read_text()
    # it ran the rest with the new setting and wrote it into config.json, as if the whole run had it
    assert main([*bench_argv(suite, out, srv.base_url), "--limit", "1", "--resume", *change]) == 2
    assert f"differs from the one in {out} in {key}" in capsys.readouterr().err
    assert (out / "config.json").read_text() == before
    assert main([*bench_argv(suite, out, srv.base_url), "--limit", "1", "--resume"]) == 0


@pytest.mark.parametrize("text", ["", "{", "[]"])
def test_resume_beside_a_config_json_that_is_no_config_is_one_line(chat_server, suite, tmp_path, capsys,
                                                                   text):
    srv = chat_server(fake_answer)
    out = tmp_path / "out"
    assert main([*bench_argv(suite, out, srv.base_url), "--limit", "1"]) == 0
    (out / "config.json").write_text(text)  # a kill while it was written left it empty or cut
    assert main([*bench_argv(suite, out, srv.base_url), "--limit", "1", "--resume"]) == 2
    err = capsys.readouterr().err  # was a JSONDecodeError or AttributeError traceback
    assert f"{out / 'config.json'}: not a bench run's config" in err and "Traceback" not in err


def test_bench_counts_failed_episodes_as_missing(chat_server, suite, tmp_path, capsys):
    srv = chat_server(fake_answer, fail_next=10**6, fail_status=401)  # the model refuses us
    out = tmp_path / "down"
    argv = bench_argv(suite, out, srv.base_url) + ["--limit", "1"]
    assert main(argv) == 1  # the reports are written, but a script must be able to tell (it was 0)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["missing"] == 2 and summary["per_turn"][0]["fast_p"]["1"] == 0.0
    assert len((out / "errors.jsonl").read_text().splitlines()) == 2
    assert "--resume" in capsys.readouterr().err


def test_run_bench_with_a_scripted_policy(suite, tmp_path):
    problems = load_suite(str(suite))
    assert [p.name for p in problems] == ["1_p", "2_p", "3_p"]
    policy = ScriptedPolicy(lambda msgs, i: fake_answer(msgs))
    cfg = LoopConfig(env=EnvConfig(max_turns=2), model="scripted")
    pytest.importorskip("pyarrow")
    summary = run_bench(problems, policy, FakeExecutor(), cfg, tmp_path / "o", samples=3, progress=False,
                        parquet=True)
    assert len(load_trajectories(tmp_path / "o" / "episodes.parquet")) == 9
    assert summary["samples"] == 9 and summary["per_turn"][1]["fast_p"]["1.2"] == 1.0
    assert summary["run"]["model"] == "scripted"
    assert (tmp_path / "o" / "fast_p.png").exists()


def test_suite_specs_the_bench_relies_on(tmp_path):
    for level in (1, 2):
        d = tmp_path / "KernelBench" / f"level{level}"
        d.mkdir(parents=True)
        for i in (10, 2):
            (d / f"{i}_op.py").write_text(RELU_REF)
    problems = load_suite(str(tmp_path), levels=(2,))
    assert [p.name for p in problems] == ["L2/2_op", "L2/10_op"] and problems[0].level == 2
    assert load_suite("builtin:cpu")


def test_executor_errors():
    with pytest.raises(ConfigError, match="--executor http needs --server URL"):
        client_executor_config("http")
    with pytest.raises(ConfigError, match=r"unknown executor 'quantum' \(local \| http \| fake\)"):
        client_executor_config("quantum")
    with pytest.raises(ConfigError, match="unknown executor 'ray'"):  # serve's, not bench's
        client_executor_config("ray")
    assert build_executor(client_executor_config("fake")).evaluate([]) == []
    http = build_executor(client_executor_config("http", server="http://127.0.0.1:9"))  # not contacted
    assert type(http).__name__ == "HttpExecutor"
    http.close()


def test_bench_missing_suite_is_a_usage_error(tmp_path, capsys):
    assert main(["bench", str(tmp_path / "missing"), "--model", "m", "--executor", "fake"]) == 2
    assert "no such file" in capsys.readouterr().err


def test_optimize_with_fake_executor_and_no_verified_kernel(chat_server, tmp_path, capsys):
    srv = chat_server(lambda msgs: "```python\nclass ModelNew: pass  # fake: hack=decoy_kernel\n```")
    ref = tmp_path / "r.py"
    ref.write_text(RELU_REF)
    out = tmp_path / "o"
    (out).mkdir()
    (out / "best_kernel.py").write_text("stale")
    rc = main(["optimize", str(ref), "--model", "stub", "--base-url", srv.base_url, "--turns", "2",
               "--executor", "fake", "--out", str(out)])
    assert rc == 0
    assert not (out / "best_kernel.py").exists()
    assert "No verified kernel" in (out / "report.md").read_text()
    assert "no verified kernel" in capsys.readouterr().out


def test_usage_errors(tmp_path, capsys):
    assert main(["optimize", str(tmp_path / "nope.py"), "--model", "m", "--executor", "fake"]) == 2
    assert main(["bench", str(tmp_path), "--model", "m", "--samples", "0", "--executor", "fake"]) == 2


def test_server_token_comes_from_the_named_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    import argparse

    from drkernel.agent.cli_options import server_token
    from drkernel.errors import ConfigError

    monkeypatch.setenv("DRK_TEST_TOKEN", "s3cret")
    assert server_token(argparse.Namespace(server_token_env="DRK_TEST_TOKEN")) == "s3cret"
    assert server_token(argparse.Namespace(server_token_env=None)) is None
    monkeypatch.delenv("DRK_TEST_TOKEN")
    with pytest.raises(ConfigError, match="DRK_TEST_TOKEN"):
        server_token(argparse.Namespace(server_token_env="DRK_TEST_TOKEN"))


def _closed_port_url():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


def test_bench_with_the_model_server_down_is_one_line_and_a_failure(suite, tmp_path, capsys, monkeypatch):
    import time

    import drkernel.agent.cli_options as cli_options

    started = []
    monkeypatch.setattr(cli_options, "build_executor",
                        lambda *a, **k: started.append(1) or FakeExecutor())
    t0 = time.monotonic()
    assert main(bench_argv(suite, tmp_path / "o", _closed_port_url())) == 2
    assert time.monotonic() - t0 < 15  # no retries
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "model server does not answer" in err[0] and "/v1/models" in err[0], err
    assert not started and not (tmp_path / "o" / "summary.json").exists()


def test_bench_names_the_models_a_server_serves(chat_server, suite, tmp_path, capsys):
    srv = chat_server(fake_answer)
    argv = bench_argv(suite, tmp_path / "o", srv.base_url)
    argv[argv.index("stub")] = "other-model"
    assert main(argv) == 2
    assert "serves stub, not 'other-model'" in capsys.readouterr().err
    assert srv.requests == []  # nothing was generated


def test_bench_refuses_a_used_out_before_starting_the_judge(chat_server, suite, tmp_path, capsys,
                                                            monkeypatch):
    import drkernel.agent.cli_options as cli_options

    srv = chat_server(fake_answer)
    out = tmp_path / "o"
    assert main(bench_argv(suite, out, srv.base_url, "--limit", "1")) == 0
    capsys.readouterr()
    monkeypatch.setattr(cli_options, "build_executor",
                        lambda *a, **k: pytest.fail("the judge was started"))
    assert main(bench_argv(suite, out, srv.base_url, "--limit", "1")) == 2
    assert "--resume" in capsys.readouterr().err


def test_ctrl_c_writes_the_report_of_finished_episodes_and_mentions_resume(chat_server, suite, tmp_path,
                                                                           capsys, monkeypatch):
    import drkernel.agent.cli_bench as cli_bench

    real = cli_bench.run_episodes

    def interrupted(jobs, *args, **kwargs):
        real(jobs[:1], *args, **kwargs)  # one episode finishes, then Ctrl-C
        raise KeyboardInterrupt

    monkeypatch.setattr(cli_bench, "run_episodes", interrupted)
    srv = chat_server(fake_answer)
    out = tmp_path / "o"
    assert main(bench_argv(suite, out, srv.base_url)) == 130
    err = capsys.readouterr().err
    assert "interrupted after 1 of 6 episodes" in err and "--resume" in err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["episodes"] == 1 and summary["missing"] == 5


def test_policy_refusals_are_counted_apart_from_hacks(tmp_path):
    from drkernel.agent.metrics import summarize
    from drkernel.agent.report import render_table
    from drkernel.agent.trajectories import Trajectory, Turn
    from drkernel.types import DeviceInfo, EvalOutcome, EvalResult

    def traj(sample, hacks, details):
        r = EvalResult(outcome=EvalOutcome.HACK_DETECTED, compiled=True, hacks=hacks, hack_details=details,
                       device=DeviceInfo(kind="cpu", name="cpu", interpreter=True))
        t = Trajectory(problem="p", sample=sample, prompt=[])
        t.turns.append(Turn(index=0, response="x", code="x", extraction="fenced", result=r, reward=0.0,
                            feedback=""))
        return t

    refused = traj(0, ["forbidden_import"], {"forbidden_import": "static: policy: line 1: import os (...)"})
    hacked = traj(1, ["introspection"], {"introspection": "static: line 2: ._getframe"})
    s = summarize([refused, hacked])
    row = s["last_turn"]
    assert row["hacked"] == 0.5 and row["refused"] == 0.5 and row["correct"] == 0.0
    assert s["interpreter"] is True
    from rich.console import Console

    console = Console(record=True, width=100)
    console.print(render_table(s))
    text = console.export_text()
    assert "refused" in text and "interpreter" in text and "each turn's kernel" in text
    from drkernel.agent.report import write_reports

    write_reports(s, tmp_path)
    assert "interpreter" in json.loads((tmp_path / "summary.json").read_text())["caveat"]


def test_resume_keeps_the_records_it_cannot_read(suite, tmp_path, caplog):
    """A record this version cannot read (a verdict it does not know, a key missing: another drkernel
    version) is rerun and stays in the log: the resume rewrote the log from the records it read, and
    the other version's finished episode was gone (or, for an unknown verdict, it was a traceback)."""
    problems = load_suite(str(suite))[:1]
    cfg = LoopConfig(env=EnvConfig(max_turns=1), model="scripted")
    policy = ScriptedPolicy(lambda msgs, i: fake_answer(msgs))
    out = tmp_path / "o"
    run_bench(problems, policy, FakeExecutor(), cfg, out, samples=3, progress=False)
    log = out / "episodes.jsonl"
    lines = log.read_text().splitlines()
    newer = json.loads(lines[1])
    newer["turns"][0]["result"]["outcome"] = "quarantined"  # a verdict of a newer judge
    older = json.loads(lines[2])
    del older["prompt"]
    kept = [json.dumps(newer), json.dumps(older)]
    log.write_text("\n".join([lines[0], *kept]) + "\n" + '{"uid": "1_p#4", "pro')  # and a torn last line
    summary = run_bench(problems, policy, FakeExecutor(), cfg, out, samples=3, resume=True, progress=False)
    assert summary["episodes"] == 3 and summary["missing"] == 0
    after = log.read_text().splitlines()
    assert after[:3] == [lines[0], *kept] and len(after) == 5  # the two rerun after them; the torn line gone
    assert "skipping unreadable record" in caplog.text


def test_resume_beside_a_deleted_config_refuses_another_models_episodes(suite, tmp_path):
    """With config.json gone, a resume under another model ran nothing (every pair was finished) and
    reported the first model's episodes as its own."""
    problems = load_suite(str(suite))[:1]
    policy = ScriptedPolicy(lambda msgs, i: fake_answer(msgs))
    out = tmp_path / "o"
    run_bench(problems, policy, FakeExecutor(), LoopConfig(env=EnvConfig(max_turns=1), model="a"), out,
              samples=2, progress=False)
    (out / "config.json").unlink()
    with pytest.raises(ConfigError, match=r"holds 2 episode\(s\) of another run \(1_p#0 of model 'a', where "
                                          r"the run's is 'b'\)"):
        run_bench(problems, policy, FakeExecutor(), LoopConfig(env=EnvConfig(max_turns=1), model="b"), out,
                  samples=2, resume=True, progress=False)
    assert not (out / "config.json").exists()


def test_errors_jsonl_holds_only_the_episodes_whose_last_run_failed(suite, tmp_path):
    """errors.jsonl kept the rows of episodes that a --resume then ran to their end, and a row per try of
    an episode that failed again: after a resume it read 6 failures where 2 episodes had failed."""
    from drkernel.errors import PolicyError

    def answer(failing):
        def script(msgs, i):
            if any(mark in msgs[-1]["content"] for mark in failing):
                raise PolicyError("the model server is down")
            return fake_answer(msgs)
        return ScriptedPolicy(script)

    problems = load_suite(str(suite))[:2]
    cfg = LoopConfig(env=EnvConfig(max_turns=1), model="scripted", policy_retries=0)
    out = tmp_path / "o"
    errors = out / "errors.jsonl"

    def failed():
        return sorted(json.loads(line)["uid"] for line in errors.read_text().splitlines())

    summary = run_bench(problems, answer(["relu"]), FakeExecutor(), cfg, out, samples=2, progress=False)
    assert summary["missing"] == 4 and failed() == ["1_p#0", "1_p#1", "2_p#0", "2_p#1"]
    summary = run_bench(problems, answer(["relu  # 1"]), FakeExecutor(), cfg, out, samples=2, resume=True,
                        progress=False)
    assert summary["missing"] == 2 and failed() == ["2_p#0", "2_p#1"]
    summary = run_bench(problems, answer([]), FakeExecutor(), cfg, out, samples=2, resume=True,
                        progress=False)
    assert summary["missing"] == 0 and not errors.exists()
    assert sorted(p.name for p in out.iterdir() if p.name.startswith(".")) == []  # no temporary file left


def test_a_new_run_in_the_out_of_a_run_that_finished_nothing_starts_errors_jsonl_anew(suite, tmp_path):
    """A run whose every episode failed (a server down) leaves no finished episode, so a new run may take
    its --out without --resume; it appended to that run's errors.jsonl, which then listed another model's
    failures, of problems the new run never planned, as its own."""
    from drkernel.errors import PolicyError

    def down(msgs, i):
        raise PolicyError("the model server is down")

    problems = load_suite(str(suite))
    out = tmp_path / "o"
    cfg = LoopConfig(env=EnvConfig(max_turns=1), model="a", policy_retries=0)
    run_bench(problems, ScriptedPolicy(down), FakeExecutor(), cfg, out, samples=1, progress=False)
    assert len((out / "errors.jsonl").read_text().splitlines()) == 3
    cfg = LoopConfig(env=EnvConfig(max_turns=1), model="b", policy_retries=0)
    summary = run_bench(problems[:1], ScriptedPolicy(lambda msgs, i: fake_answer(msgs)), FakeExecutor(), cfg,
                        out, samples=1, progress=False)
    assert summary["missing"] == 0 and not (out / "errors.jsonl").exists()
