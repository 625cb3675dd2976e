"""Newcomer edges of `drkernel bench` and `optimize` (issue 35, part B): builtin:gpu on a CPU judge,
`drkernel report`, the interpreter caveat of optimize."""

from __future__ import annotations

import pytest

from drkernel.cli import main


def _bench(*extra: str) -> list[str]:
    # an endpoint nobody answers: a run that gets past the size check stops there instead, exit 2
    return ["bench", "--model", "m", "--base-url", "http://127.0.0.1:1/v1", "--executor", "local", *extra]


@pytest.mark.parametrize("device", [["--device", "cpu"], []])
def test_builtin_gpu_on_a_cpu_judge_is_refused_with_one_line(
        device: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        tmp_path) -> None:
    from drkernel.executors import local

    monkeypatch.setattr(local, "_gpu_count", lambda: 0)  # no GPU here, whatever the machine has
    assert main(_bench("builtin:gpu", "--out", str(tmp_path / "o"), *device)) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("drkernel bench: builtin:gpu ")
    assert "use builtin:cpu" in lines[0]
    assert not (tmp_path / "o").exists()


def test_force_gpu_suite_and_a_gpu_pass_the_size_check(monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str], tmp_path) -> None:
    from drkernel.executors import local

    monkeypatch.setattr(local, "_gpu_count", lambda: 0)
    for argv in (_bench("builtin:gpu", "--device", "cpu", "--force-gpu-suite"), _bench("builtin:cpu"),
                 _bench("builtin:gpu", "--device", "cuda:0")):
        assert main([*argv, "--out", str(tmp_path / "o")]) == 2  # stopped later, by the dead endpoint
        err = capsys.readouterr().err
        assert "builtin:gpu holds" not in err and "127.0.0.1:1" in err, err


def test_report_writes_a_runs_reports_again_without_running_it(chat_server, tmp_path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """`drkernel report OUT` (issue 35, part B): the reports of an earlier bench from its episodes, the
    same files and tables, no model, no judge."""
    import json

    from tests.agent.test_cli_bench import bench_argv, fake_answer

    suite = tmp_path / "suite"
    suite.mkdir()
    from tests.agent.agent_fixtures import RELU_REF

    for i in range(2):
        (suite / f"{i + 1}_p.py").write_text(RELU_REF.replace("relu", f"relu  # {i}"))
    srv = chat_server(fake_answer)
    out = tmp_path / "out"
    assert main(bench_argv(suite, out, srv.base_url)) == 0
    first = capsys.readouterr().out
    written = {name: (out / name).read_text() for name in ("summary.json", "fast_p.csv", "problems.csv")}
    for name in (*written, "fast_p.png"):
        (out / name).unlink()
    asked = len(srv.requests)
    assert main(["report", str(out)]) == 0
    assert len(srv.requests) == asked  # nothing was run
    assert {name: (out / name).read_text() for name in written} == written
    assert (out / "fast_p.png").stat().st_size > 0
    assert capsys.readouterr().out == first
    assert json.loads(written["summary.json"])["run"]["model"] == "stub"


def test_report_of_a_folder_without_a_run_is_one_line(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"drkernel report: {tmp_path}: no bench run there (no config.json)"]
    assert main(["report", str(tmp_path / "typo")]) == 2
    assert "typo: no such folder" in capsys.readouterr().err
    (tmp_path / "f.txt").write_text("x")
    assert main(["report", str(tmp_path / "f.txt")]) == 2
    assert "f.txt: a file, not a bench run's folder" in capsys.readouterr().err


def test_optimize_on_the_interpreter_says_its_times_mean_nothing_on_a_gpu(
        chat_server, tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from tests.agent.agent_fixtures import RELU_REF

    srv = chat_server(lambda msgs: "```python\nclass ModelNew: pass  # fake: speedup=1.3\n```")
    ref = tmp_path / "r.py"
    ref.write_text(RELU_REF)
    out = tmp_path / "o"
    assert main(["optimize", str(ref), "--model", "stub", "--base-url", srv.base_url, "--turns", "1",
                 "--executor", "fake", "--out", str(out)]) == 0  # the fake judge reports the interpreter
    report = json.loads((out / "report.json").read_text())
    assert report["interpreter"] is True
    assert report["caveat"].startswith("judged under Triton's interpreter on the CPU")
    assert "say nothing about the kernel's speed on a GPU" in report["caveat"]
    captured = capsys.readouterr()
    assert "best: turn 1, speedup 1.3x (interpreter timing, not a GPU speedup)" in captured.out
    assert f"note: {report['caveat']}" in captured.err
    assert report["caveat"] in (out / "report.md").read_text()


@pytest.mark.parametrize("limit", ["0", "-1"])
def test_a_limit_below_one_is_refused_not_all_or_all_but_the_last(
        limit: str, tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    """--limit 0 ran every problem and --limit -1 every problem but the last (a Python slice)."""
    argv = ["bench", "builtin:cpu", "--model", "m", "--base-url", "http://127.0.0.1:1/v1",
            "--executor", "fake", "--limit", limit, "--out", str(tmp_path / "o")]
    assert main(argv) == 2
    assert capsys.readouterr().err.strip().splitlines() == [f"drkernel bench: --limit {limit}: must be >= 1"]
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("command", ["bench", "optimize"])
def test_an_out_that_cannot_be_a_folder_is_one_line_before_any_judge(
        command: str, tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    """--out naming a file (or a place no folder can be made) was a FileExistsError traceback, after the
    model's endpoint was checked and the judges had started."""
    from pathlib import Path

    import drkernel

    target = ("builtin:cpu" if command == "bench"
              else str(Path(drkernel.__file__).parent / "examples" / "relu_scale" / "reference.py"))
    taken = tmp_path / "a_file"
    taken.write_text("")
    for out in (taken, taken / "below"):
        argv = [command, target, "--model", "m", "--base-url", "http://127.0.0.1:1/v1", "--executor", "fake",
                "--out", str(out)]
        assert main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        said = "is a file, not a folder" if out == taken else "cannot make the folder"
        assert len(err) == 1 and err[0].startswith(f"drkernel {command}: --out {out}: {said}"), err
        assert "127.0.0.1:1" not in err[0]  # refused before the (dead) model endpoint was asked


@pytest.mark.parametrize("command", ["bench", "optimize"])
def test_a_server_nobody_answers_at_is_one_line_before_the_model_is_asked(
        command: str, chat_server, tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    """--executor http --server URL where no drkernel server listens ran the episodes anyway: each failed
    after the model's answer was spent on it, and the command exited 0 ('episode ended early')."""
    import socket
    import time
    from pathlib import Path

    import drkernel
    from tests.agent.test_cli_bench import fake_answer

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    srv = chat_server(fake_answer)
    target = ("builtin:cpu" if command == "bench"
              else str(Path(drkernel.__file__).parent / "examples" / "relu_scale" / "reference.py"))
    start = time.monotonic()
    code = main([command, target, "--model", "stub", "--base-url", srv.base_url, "--executor", "http",
                 "--server", dead, "--turns", "1", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith(f"drkernel {command}: --server {dead}: "), err
    assert srv.requests == [] and time.monotonic() - start < 15  # no answer spent, no 30 s of retries


@pytest.mark.parametrize("token", [None, "wrong"])
def test_a_server_that_wants_another_token_is_one_line_before_the_model_is_asked(
        token: str | None, chat_server, tmp_path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A server started with DRKERNEL_AUTH_TOKEN answers /health without it: the start's check passed, and
    each evaluation failed HTTP 401 after the model's answer was spent on it (exit 1, 'ended early')."""
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    from pathlib import Path

    import drkernel
    from tests.agent.test_cli_bench import fake_answer

    class Guarded(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def _answer(self) -> None:
            open_route = self.path == "/health"
            ok = open_route or self.headers.get("authorization") == "Bearer right"
            body = json.dumps({"workers": {"total": 1}} if ok else {"message": "bad bearer token"}).encode()
            self.send_response(200 if ok else 401)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = _answer  # noqa: N815 (http.server naming)

    judge = ThreadingHTTPServer(("127.0.0.1", 0), Guarded)
    threading.Thread(target=judge.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{judge.server_address[1]}"
    srv = chat_server(fake_answer)
    ref = str(Path(drkernel.__file__).parent / "examples" / "relu_scale" / "reference.py")
    args = ["optimize", ref, "--model", "stub", "--base-url", srv.base_url, "--executor", "http",
            "--server", url, "--turns", "1", "--out", str(tmp_path / "o")]
    if token:
        monkeypatch.setenv("JUDGE_TOKEN", token)
        args += ["--server-token-env", "JUDGE_TOKEN"]
    try:
        code = main(args)
    finally:
        judge.shutdown()
        judge.server_close()
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith(f"drkernel optimize: --server {url}: "), err
    assert "401" in err[0] and "--server-token-env" in err[0], err
    assert srv.requests == []  # no answer of the model spent


@pytest.mark.parametrize("command", ["bench", "optimize"])
@pytest.mark.parametrize(("flags", "said"), [
    (["--server", "http://gpu-host:8000"], "--server: --executor http's"),
    (["--executor", "local", "--server-token-env", "TOKEN"], "--server-token-env: --executor http's"),
    (["--executor", "fake", "--server", "http://gpu-host:8000"], "--server: --executor http's"),
    (["--executor", "http", "--server", "http://gpu-host:8000", "--workers", "4"], "--workers: the local"),
])
def test_a_judge_flag_the_executor_would_ignore_is_one_line(
        command: str, flags: list[str], said: str, tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    """`--server URL` without `--executor http` judged on this machine's local pool (the CPU interpreter
    where it has no GPU), and --workers with the http or fake executor set nothing, without a word."""
    from pathlib import Path

    import drkernel

    target = ("builtin:cpu" if command == "bench"
              else str(Path(drkernel.__file__).parent / "examples" / "relu_scale" / "reference.py"))
    code = main([command, target, "--model", "m", "--base-url", "http://127.0.0.1:1/v1", *flags,
                 "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith(f"drkernel {command}: {said}"), err


def _bench_folder(tmp_path, episodes: str) -> tuple:
    """A bench --out with a minimal config.json, the given episodes.jsonl and a summary.json of its own."""
    import json

    out = tmp_path / "out"
    out.mkdir()
    config = {"model": "m", "samples": 1, "turns": 1, "problems": ["1_p"]}
    (out / "config.json").write_text(json.dumps(config))
    (out / "episodes.jsonl").write_text(episodes)
    (out / "summary.json").write_text('{"written": "by the run"}')
    return out, (out / "summary.json").read_text()


def test_report_of_episodes_it_cannot_read_leaves_the_reports_alone(
        tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    """Every record from another version (or not a log at all): one line, and the run's own reports
    are not overwritten with zeros."""
    out, summary = _bench_folder(tmp_path, '{"uid": "1_p#0", "turns": [{"x": 1}]}\n[1]\n')
    assert main(["report", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == (f"drkernel report: {out / 'episodes.jsonl'}: none of its 2 record(s) could be read "
                       "(written by another drkernel version?); the reports were left as they were")
    assert (out / "summary.json").read_text() == summary


def test_report_of_an_unreadable_episode_log_is_one_line(tmp_path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    out, _ = _bench_folder(tmp_path, "")
    (out / "episodes.jsonl").unlink()
    (out / "episodes.jsonl").mkdir()
    assert main(["report", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"drkernel report: {out / 'episodes.jsonl'}: cannot read it (Is a directory)"]


def test_report_of_an_empty_log_points_at_bench_resume(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    out, _ = _bench_folder(tmp_path, "")
    assert main(["report", str(out)]) == 1
    assert "1 of 1 episode missing or failed, in 1 of 1 problem; rerun the bench with --resume" in (
        capsys.readouterr().err)


def test_report_of_an_interrupted_run_writes_its_reports_and_exits_1(
        tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    """A bench stopped before its end (Ctrl-C, a kill, a server that failed episodes) left a partial run:
    report wrote its reports and exited 0, so `drkernel bench ... ; drkernel report ... && publish` or a
    CI gate on the report took 1 episode of 4 for a finished benchmark. It exits 1, as bench itself does
    for such a run, and says how much is missing; --allow-partial accepts the partial run."""
    import json

    out, _ = _bench_folder(tmp_path, _episode("1_p", 0, "m"))
    config = json.loads((out / "config.json").read_text())
    config.update(samples=2, problems=["1_p", "2_p"])
    (out / "config.json").write_text(json.dumps(config))
    assert main(["report", str(out)]) == 1
    captured = capsys.readouterr()
    assert "Fast@p" in captured.out  # the tables of what is there
    err = captured.err.strip().splitlines()
    assert err == ["3 of 4 episodes missing or failed, in 2 of 2 problems; rerun the bench with --resume to "
                   "retry them (report --allow-partial exits 0 on a partial run)"], err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["episodes"] == 1 and summary["missing"] == 3 and summary["incomplete_problems"] == 2
    assert main(["report", str(out), "--allow-partial"]) == 0
    assert "3 of 4 episodes missing or failed" in capsys.readouterr().err
    (out / "episodes.jsonl").write_text("".join(_episode("1_p", s, "m") for s in (0, 1)))
    assert main(["report", str(out)]) == 1  # one problem done, the other not begun
    assert "2 of 4 episodes missing or failed, in 1 of 2 problems" in capsys.readouterr().err
    (out / "episodes.jsonl").write_text("".join(_episode(p, s, "m") for p in ("1_p", "2_p") for s in (0, 1)))
    assert main(["report", str(out)]) == 0
    assert "missing" not in capsys.readouterr().err


@pytest.mark.parametrize("text", ["[]", "null", "3", '"config"'])
def test_report_beside_a_config_json_that_is_no_object_is_one_line(
        tmp_path, text: str, capsys: pytest.CaptureFixture[str]) -> None:
    """A config.json that is JSON but no object (a list, null) was 'internal error (AttributeError)', exit
    70, where `bench --resume` beside it said in one line that it is not a bench run's config."""
    out, summary = _bench_folder(tmp_path, "")
    (out / "config.json").write_text(text)
    assert main(["report", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"drkernel report: {out / 'config.json'}: not a bench run's config (not a JSON object)"]
    assert (out / "summary.json").read_text() == summary


def test_report_of_a_verdict_this_version_does_not_know_names_the_log(
        tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    """A record with a verdict unknown here (a newer judge's) was blamed on config.json ("not a bench
    run's config (ValueError: 'quarantined' is not a valid EvalOutcome)")."""
    import json

    record = {"problem": "1_p", "sample": 0, "prompt": [], "turns": [
        {"index": 0, "response": "r", "code": "c", "extraction": "last_fence", "reward": 0.0, "feedback": "f",
         "result": {"outcome": "quarantined"}}]}
    out, summary = _bench_folder(tmp_path, json.dumps(record) + "\n")
    assert main(["report", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(f"drkernel report: {out / 'episodes.jsonl'}: none of its 1 record(s)"), err
    assert (out / "summary.json").read_text() == summary


def _episode(problem: str, sample: int, model: str, turns: int = 1) -> str:
    import json

    return json.dumps({"problem": problem, "sample": sample, "model": model, "prompt": [], "turns": [
        {"index": i, "response": "r", "code": "c", "extraction": "last_fence", "reward": 2.0, "feedback": "f",
         "result": {"outcome": "ok", "correct": True, "compiled": True, "speedup": 1.5}}
        for i in range(turns)]}) + "\n"


@pytest.mark.parametrize("episodes, why", [
    ([("1_p", 0, "m", 1), ("1_p", 1, "m", 1)], "1_p#1 of sample 1, where the run has 1 per problem"),
    ([("1_p", 0, "other", 1)], "1_p#0 of model 'other', where the run's is 'm'"),
    ([("1_p", 0, "m", 2)], "1_p#0 of 2 turns, where the run has 1"),
])
def test_report_of_a_log_holding_another_runs_episodes_is_one_line(
        tmp_path, capsys: pytest.CaptureFixture[str], episodes: list, why: str) -> None:
    """Episodes that the run's config.json did not plan (logs merged by hand, a resume beside a deleted
    config.json) were counted in its Fast@p: another model's, more samples per problem than planned
    (Fast@p over 1 planned sample read 200 %), or more turns."""
    out, summary = _bench_folder(tmp_path, "".join(_episode(*e) for e in episodes))
    assert main(["report", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"drkernel report: {out / 'episodes.jsonl'}: holds 1 episode(s) of another run ({why}); "
                   "the reports were left as they were"], err
    assert (out / "summary.json").read_text() == summary


def test_report_of_a_paper_protocol_run_keeps_its_note(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    """bench --protocol paper ends with a note that points at paper_differences; report of the same run
    printed the tables without it, and summary.json did not carry the list."""
    import json

    out, _ = _bench_folder(tmp_path, _episode("1_p", 0, "m"))
    config = json.loads((out / "config.json").read_text())
    config.update(protocol="paper", paper_differences=["one", "two", "three"])
    (out / "config.json").write_text(json.dumps(config))
    assert main(["report", str(out)]) == 0
    assert (f"note: --protocol paper: this run differs from the authors' evaluation in 3 ways, listed under "
            f"paper_differences in {out / 'config.json'}") in capsys.readouterr().err
    run = json.loads((out / "summary.json").read_text())["run"]
    assert run["paper_differences"] == ["one", "two", "three"]


def test_a_run_judged_on_two_devices_says_so(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    """bench --resume compares the run's settings, not the judge's device or its torch: a run resumed on
    another machine (another GPU, or the CPU's interpreter where the GPU was not visible, or after a torch
    upgrade) mixed two devices' timings in one Fast@p, and neither bench nor report said a word."""
    import json

    h100 = {"kind": "cuda", "name": "NVIDIA H100", "interpreter": False, "torch_version": "2.5.1",
            "triton_version": "3.1.0"}

    def log(*devices: dict) -> str:
        records = [json.loads(_episode("1_p", sample, "m")) for sample in range(len(devices))]
        for record, device in zip(records, devices, strict=True):
            record["turns"][0]["result"]["device"] = device
        return "".join(json.dumps(record) + "\n" for record in records)

    out, _ = _bench_folder(tmp_path, log(h100, h100))
    config = json.loads((out / "config.json").read_text())
    (out / "config.json").write_text(json.dumps({**config, "samples": 3}))
    assert main(["report", str(out), "--allow-partial"]) == 0
    assert "devices" not in capsys.readouterr().err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["devices"] == ["NVIDIA H100 (torch 2.5.1, triton 3.1.0)"]
    h200, upgraded = {**h100, "name": "NVIDIA H200"}, {**h100, "torch_version": "2.6.0"}
    (out / "episodes.jsonl").write_text(log(h100, h200, upgraded))  # resumed elsewhere, then after an upgrade
    assert main(["report", str(out)]) == 0
    err = capsys.readouterr().err
    devices = ["NVIDIA H100 (torch 2.5.1, triton 3.1.0)", "NVIDIA H100 (torch 2.6.0, triton 3.1.0)",
               "NVIDIA H200 (torch 2.5.1, triton 3.1.0)"]
    assert ("warning: this run's kernels were judged on 3 devices or torch/Triton versions "
            f"({'; '.join(devices)}): its speedups, and so Fast@p, mix their timings (a --resume on another "
            "machine?)") in err, err
    assert json.loads((out / "summary.json").read_text())["devices"] == devices


def test_a_new_bench_into_another_versions_episodes_is_refused(tmp_path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """An --out whose log holds only records this version cannot read (another drkernel version's run):
    a new run went ahead, appended its episodes to theirs and wrote its config.json over their run's."""
    out, _ = _bench_folder(tmp_path, '{"uid": "1_p#0", "turns": [{"x": 1}]}\n{"uid": "1_p#1", "pro')
    log = (out / "episodes.jsonl").read_text()
    assert main(_bench("builtin:cpu", "--out", str(out))) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"drkernel bench: {out} holds 1 episode this drkernel cannot read (another version's "
                   f"run): choose another --out, or remove {out / 'episodes.jsonl'}"]
    assert (out / "episodes.jsonl").read_text() == log
    (out / "episodes.jsonl").write_text('{"uid": "1_p#1", "pro')  # only a torn line: no episode there
    assert main(_bench("builtin:cpu", "--out", str(out))) == 2  # stopped later, by the dead endpoint
    assert "127.0.0.1:1" in capsys.readouterr().err


def test_report_into_a_folder_that_does_not_take_it_is_one_line(
        tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    """A report file the run's folder does not take (a folder at its name here; no right to write or a
    full disk alike) was an IsADirectoryError or PermissionError traceback called a bug of drkernel (exit
    70). It is one line naming the file, exit 2, and the reports written before stay whole."""
    out, _ = _bench_folder(tmp_path, _episode("1_p", 0, "m"))
    (out / "fast_p.csv").mkdir()
    assert main(["report", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"drkernel report: {out / 'fast_p.csv'}: cannot write the report: Is a directory (the "
                   f"episodes are kept: `drkernel report {out}` writes the reports again)"], err
    assert not [p.name for p in out.iterdir() if p.name.endswith(".tmp")]
