"""End to end on the CPU: a stub OpenAI chat server drives `drkernel optimize` and `drkernel bench`
through OpenAIPolicy against the real judge (Triton interpreter), with broken code, a hack and
honest kernels; and 15 turns of test-time scaling keep the prompt within its budget."""

import json
import threading

import pytest

from drkernel.agent.trajectories import load_trajectories
from drkernel.cli import main
from tests.agent.agent_fixtures import RELU_BROKEN, RELU_HACK, RELU_REF, answer, relu_kernel

pytest.importorskip("drkernel.sandbox.judge")
pytestmark = pytest.mark.slow

SCALE_REF = RELU_REF.replace("torch.relu(x)", "x * 2.0")
SCALE_KERNEL = relu_kernel(1024).replace("tl.maximum(x, 0.0)", "x * 2.0")


def turn_of(messages):
    return sum(m["role"] == "assistant" for m in messages)


def judge_args(tmp_path):
    return ["--executor", "local", "--device", "cpu", "--workers", "1", "--perf-trials", "2"]


def test_optimize_against_the_real_judge(chat_server, tmp_path, capsys):
    script = [
        "Let me think about the memory layout first.",  # no code: judged without the judge
        answer(RELU_BROKEN),
        answer(RELU_HACK, "torch.relu is already optimal."),
        answer(relu_kernel(256)),
        answer(relu_kernel(16384), "Bigger blocks: fewer programs."),
    ]
    srv = chat_server(lambda msgs: script[min(turn_of(msgs), len(script) - 1)])
    ref = tmp_path / "relu.py"
    ref.write_text(RELU_REF)
    out = tmp_path / "opt"
    rc = main(["optimize", str(ref), "--model", "stub", "--base-url", srv.base_url,
               "--turns", "5", "--out", str(out), *judge_args(tmp_path)])
    assert rc == 0
    report = json.loads((out / "report.json").read_text())
    outcomes = [t["outcome"] for t in report["turns"]]
    assert outcomes == ["no_code", "compile_error", "hack_detected", "ok", "ok"]  # the judge saw no turn 1
    assert report["turns"][0]["error"] == "no_code"
    assert report["turns"][2]["hacks"] and report["turns"][2]["reward"] == 0.0
    assert report["best_turn"] == 5  # larger blocks run faster under the interpreter
    assert "BLOCK_SIZE = 16384" in (out / "best_kernel.py").read_text()
    [traj] = load_trajectories(out / "trajectory.jsonl")
    assert traj.turns[3].logprobs == [-0.5] * len(traj.turns[3].logprobs)
    assert "reward hacking" in traj.turns[2].feedback  # the model was told why
    assert "interpreter" in (out / "report.md").read_text()
    # the server saw the judge's feedback in the follow-up prompts
    assert "hack" in srv.requests[3]["messages"][-1]["content"]
    assert "best: turn 5" in capsys.readouterr().out


def test_bench_against_the_real_judge(chat_server, tmp_path, capsys):
    def script(msgs):
        relu = "torch.relu(x)" in msgs[0]["content"]
        if turn_of(msgs) == 0:
            return answer(RELU_HACK if relu else RELU_BROKEN)
        return answer(relu_kernel(1024) if relu else SCALE_KERNEL)

    srv = chat_server(script)
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "1_relu.py").write_text(RELU_REF)
    (suite / "2_scale.py").write_text(SCALE_REF)
    out = tmp_path / "bench"
    argv = ["bench", str(suite), "--model", "stub", "--base-url", srv.base_url, "--samples", "2",
            "--turns", "2", "--out", str(out), "--no-progress", "--concurrency", "4", *judge_args(tmp_path)]
    assert main(argv) == 0
    summary = json.loads((out / "summary.json").read_text())
    t1, t2 = summary["per_turn"]
    assert summary["samples"] == 4 and summary["missing"] == 0
    assert t1["hacked"] == 0.5 and t1["correct"] == 0.0 and t1["compiled"] == 0.5
    assert t2["correct"] == 1.0 and t2["hacked"] == 0.0
    # interpreter timings: honest kernels are far slower than eager torch, so Fast@1 is 0
    assert t2["fast_p"]["1"] == 0.0
    assert (out / "fast_p.png").stat().st_size > 0 and (out / "fast_p.csv").exists()
    assert len((out / "episodes.jsonl").read_text().splitlines()) == 4
    assert "p=1.2" in capsys.readouterr().out


def test_bench_held_out_counts_the_kernels_that_survive_unseen_shapes(chat_server, tmp_path, capsys):
    """Turn 1: an honest kernel; turn 2: the same kernel, refusing every shape but the one shown.
    Both are correct on the problem's shape; only the first passes the held-out ones, which the
    model never sees."""
    ref = (RELU_REF.replace("torch.randn(64, 256)", "torch.randn(batch_size, dim)")
           + "\nbatch_size = 64\ndim = 256\n")
    held_out = ["batch_size = 3\ndim = 100", "batch_size = 5\ndim = 4097"]
    honest = relu_kernel(1024)
    locked = honest.replace(
        "        x = x.contiguous()\n",
        "        if tuple(x.shape) != (64, 256):\n            raise ValueError('not the shape I was shown')\n"
        "        x = x.contiguous()\n",
    )
    assert locked != honest
    srv = chat_server(lambda msgs: answer(honest if turn_of(msgs) == 0 else locked))
    suite = tmp_path / "suite.jsonl"
    suite.write_text(json.dumps({"name": "relu", "reference_code": ref, "shape_variants": held_out}) + "\n")
    out = tmp_path / "bench"
    argv = ["bench", str(suite), "--model", "stub", "--base-url", srv.base_url, "--samples", "2",
            "--turns", "2", "--out", str(out), "--no-progress", "--held-out", *judge_args(tmp_path)]
    assert main(argv) == 0
    summary = json.loads((out / "summary.json").read_text())
    t1, t2 = summary["per_turn"]
    assert t1["correct"] == t2["correct"] == 1.0
    assert t1["held_out"] == {"checked": 2, "survived": 2}
    assert t2["held_out"] == {"checked": 2, "survived": 0}
    assert summary["run"]["held_out"] is True
    assert "held-out" in capsys.readouterr().out
    csv_rows = (out / "fast_p.csv").read_text().splitlines()
    assert "2,held_out_survived,,0" in csv_rows and "1,held_out_survived,,2" in csv_rows
    # the held-out shapes and their results stay unseen: nothing of them reaches the model
    seen = json.dumps([r["messages"] for r in srv.requests])
    assert "4097" not in seen and "not the shape I was shown" not in seen
    # without the flag nothing is checked, and a resume may not switch it on
    out2 = tmp_path / "bench2"
    argv2 = [a for a in argv if a != "--held-out"]
    argv2[argv2.index(str(out))] = str(out2)
    assert main(argv2) == 0
    plain = json.loads((out2 / "summary.json").read_text())
    assert plain["per_turn"][1]["held_out"] == {"checked": 0, "survived": 0}
    assert main([*argv2, "--resume", "--held-out"]) == 2


def test_bench_held_out_derives_shapes_for_a_kernelbench_folder(chat_server, tmp_path, capsys):
    """A folder of KernelBench files carries no held-out shapes: --held-out derives them from the
    reference's size constants (batch 64 -> 33, dim 256 -> 128)."""
    ref = (RELU_REF.replace("torch.randn(64, 256)", "torch.randn(batch_size, dim)")
           + "\nbatch_size = 64\ndim = 256\n")
    honest = relu_kernel(1024)
    locked = honest.replace("        x = x.contiguous()\n",
                            "        assert tuple(x.shape) == (64, 256)\n        x = x.contiguous()\n")
    srv = chat_server(lambda msgs: answer(honest if turn_of(msgs) == 0 else locked))
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "1_relu.py").write_text(ref)
    out = tmp_path / "bench"
    argv = ["bench", str(suite), "--model", "stub", "--base-url", srv.base_url, "--samples", "1",
            "--turns", "2", "--out", str(out), "--no-progress", "--held-out", *judge_args(tmp_path)]
    assert main(argv) == 0
    assert "0 problem(s) carry their own, 1 derived from size constants" in capsys.readouterr().err
    t1, t2 = json.loads((out / "summary.json").read_text())["per_turn"]
    assert t1["correct"] == t2["correct"] == 1.0
    assert t1["held_out"] == {"checked": 1, "survived": 1} and t2["held_out"] == {"checked": 1, "survived": 0}
    [traj] = load_trajectories(out / "episodes.jsonl")
    assert traj.turns[1].result.shape_variants_total == 2  # both derived shapes ran on the reference


def test_optimize_held_out_keeps_the_kernel_that_works_at_every_size(chat_server, tmp_path, capsys):
    """Turn 2 is faster (bigger blocks under the interpreter) but refuses any shape but the one shown:
    with --held-out the kept kernel is turn 1's, which passes the derived shapes."""
    ref = (RELU_REF.replace("torch.randn(64, 256)", "torch.randn(batch_size, dim)")
           + "\nbatch_size = 64\ndim = 256\n")
    locked = relu_kernel(16384).replace("        x = x.contiguous()\n",
                                        "        assert tuple(x.shape) == (64, 256)\n"
                                        "        x = x.contiguous()\n")
    script = [answer(relu_kernel(256)), answer(locked)]
    srv = chat_server(lambda msgs: script[min(turn_of(msgs), 1)])
    (tmp_path / "relu.py").write_text(ref)
    runs = {}
    for flag in ([], ["--held-out"]):
        out = tmp_path / ("held" if flag else "plain")
        rc = main(["optimize", str(tmp_path / "relu.py"), "--model", "stub", "--base-url", srv.base_url,
                   "--turns", "2", "--out", str(out), *flag, *judge_args(tmp_path)])
        assert rc == 0
        runs[bool(flag)] = (json.loads((out / "report.json").read_text()),
                            (out / "best_kernel.py").read_text(), (out / "report.md").read_text())
    plain, held = runs[False], runs[True]
    assert [t["outcome"] for t in plain[0]["turns"]] == ["ok", "ok"]
    assert plain[0]["best_turn"] == 2 and "BLOCK_SIZE = 16384" in plain[1]  # fastest wins without the check
    assert [t["held_out"] for t in held[0]["turns"]] == [[2, 2], [0, 2]]
    assert held[0]["best_turn"] == 1 and "BLOCK_SIZE = 256" in held[1]
    assert "Held-out shapes (never shown to the model): 2 of 2 passed." in held[2] and "| 0/2 |" in held[2]
    assert "held-out shapes (never shown to the model): 2" in capsys.readouterr().err


def test_stts_keeps_the_prompt_bounded_over_15_turns(chat_server, tmp_path):
    count = {"n": 0}
    lock = threading.Lock()
    kernels = [RELU_BROKEN, RELU_HACK, relu_kernel(256), relu_kernel(1024), relu_kernel(4096)]

    def script(msgs):
        with lock:
            i = count["n"]
            count["n"] += 1
        prose = "I considered the tiling carefully. " * (40 * (1 + i % 4))  # long, varied answers
        if i % 6 == 5:
            return prose  # no code at all
        return answer(kernels[i % len(kernels)], prose)

    srv = chat_server(script)
    ref = tmp_path / "relu.py"
    ref.write_text(RELU_REF)
    out = tmp_path / "tts"
    budget = 4000
    rc = main(["optimize", str(ref), "--model", "stub", "--base-url", srv.base_url, "--tts",
               "--turns", "15", "--prompt-budget", str(budget), "--out", str(out), *judge_args(tmp_path)])
    assert rc == 0
    [traj] = load_trajectories(out / "trajectory.jsonl")
    assert len(traj.turns) == 15 and traj.error is None
    tokens = [t.prompt_tokens for t in traj.turns]
    assert max(tokens) <= budget
    assert all(len(t.context) <= 4 for t in traj.turns)
    # what the server received: bounded, whereas the full history would have grown past 15k tokens
    sizes = [sum(len(m["content"]) for m in r["messages"]) for r in srv.requests]
    full = sum(len(t.response) + len(t.feedback) for t in traj.turns[:-1]) + len(traj.prompt[0]["content"])
    assert max(sizes) <= 4 * budget < full / 2
    best = traj.best_turn()
    assert best is not None and best.correct and "BLOCK_SIZE = 4096" in (out / "best_kernel.py").read_text()
    # top-4 by reward: from turn 6 on, the context holds the best turns seen so far
    rewards = [t.reward for t in traj.turns]
    for t in traj.turns[6:]:
        shown = sorted(rewards[j] for j in t.context)
        assert shown == sorted(rewards[: t.index], reverse=True)[: len(shown)][::-1]


def test_bench_through_the_judge_service(chat_server, tmp_path):
    """agent -> HttpExecutor -> `drkernel serve` (real sandbox judge) -> report."""
    launch = pytest.importorskip("drkernel.server.launch")

    def script(msgs):
        return answer(RELU_HACK if turn_of(msgs) == 0 else relu_kernel(1024))

    srv = chat_server(script)
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "relu.py").write_text(RELU_REF)
    out = tmp_path / "bench"
    with launch.ServerProcess(tmp_path / "serve.db", extra=["--workers", "1"]) as server:
        argv = ["bench", str(suite), "--model", "stub", "--base-url", srv.base_url, "--samples", "2",
                "--turns", "2", "--out", str(out), "--no-progress", "--executor", "http",
                "--server", server.url, "--perf-trials", "2"]
        assert main(argv) == 0
    summary = json.loads((out / "summary.json").read_text())
    t1, t2 = summary["per_turn"]
    assert t1["hacked"] == 1.0 and t2["correct"] == 1.0
    assert summary["hack_codes"].get("decoy_kernel", 0) >= 1
