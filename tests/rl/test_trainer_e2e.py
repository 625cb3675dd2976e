"""debug_cpu end to end: a tiny random model trains through the real judge (Triton interpreter), and a
run killed with SIGKILL after a checkpoint resumes and finishes with every step logged once."""

import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from drkernel.recipes import debug_cpu
from drkernel.rl.config import apply_overrides
from drkernel.rl.runlog import read_metrics
from drkernel.rl.trainer import Trainer

pytestmark = pytest.mark.slow


def test_debug_cpu_trains_through_the_real_judge(tmp_path):
    cfg = apply_overrides(debug_cpu(), ["trainer.steps=2", "trainer.validate_every=2"])
    with Trainer(cfg, tmp_path) as trainer:
        metrics = trainer.fit()
    assert [m["step"] for m in metrics] == [1, 2]
    judged = [json.loads(line) for line in (tmp_path / "eval_cache.jsonl").read_text().splitlines()]
    outcomes = {r["result"]["outcome"] for r in judged}
    assert "ok" in outcomes and "hack_detected" in outcomes  # honest kernels pass, passthroughs are caught
    assert all(r["result"]["device"]["interpreter"] for r in judged)
    assert sum(m["actor/trained_rows"] for m in metrics) > 0  # some group had signal
    for m in metrics:
        assert m["mrs/reject_rate"] == 0.0 and m["mismatch/log_ratio_abs_max"] < 1e-3  # same weights
        assert m["batch/hack_rate"] > 0 and 0 <= m["reward/mean"] <= 2.0
    assert "val/fast@1" in metrics[-1]
    assert (tmp_path / "validation" / "step_000002" / "summary.json").is_file()
    assert list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))
    assert [r["step"] for r in read_metrics(tmp_path / "metrics.jsonl")] == [1, 2]


def _descendants(pid):
    children = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(d.name))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def _alive(pid):
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _train(run_dir, steps):
    cmd = [sys.executable, "-m", "drkernel.cli", "train", "rl", "--recipe", "debug_cpu",
           "--run-dir", str(run_dir), "--set", f"trainer.steps={steps}", "--set", "trainer.validate_every=0"]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def test_killed_run_resumes_from_its_checkpoint(tmp_path):
    run = tmp_path / "run"
    proc = _train(run, steps=5)
    latest = run / "checkpoints" / "latest"
    deadline = time.monotonic() + 240
    while not latest.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert proc.poll() is None, proc.communicate()[1][-2000:]
    # each step's line reaches the pipe (a log file) when printed, not when the run exits
    ready, _, _ = select.select([proc.stdout], [], [], 60)
    assert ready, "step 1 was checkpointed but its line never reached stdout"
    first = proc.stdout.readline()
    assert first.startswith("step 1: reward"), first
    family = _descendants(proc.pid)
    os.kill(proc.pid, signal.SIGKILL)  # a crash: no cleanup, no atexit
    proc.wait()
    _, killed_err = proc.communicate()
    end = time.monotonic() + 30
    while any(_alive(p) for p in family) and time.monotonic() < end:
        time.sleep(0.2)
    leftovers = [p for p in family if _alive(p)]
    for p in leftovers:  # the judge workers we started through the trainer, if they outlived it
        os.kill(p, signal.SIGKILL)
    killed_at = int(latest.read_text().strip().split("_")[1])
    assert 1 <= killed_at < 5
    # lines reach a pipe (or a log file) as they are printed: a killed run's log tells where it was
    assert "step 1/5: rollouts" in killed_err and "judging" in killed_err and "left" in killed_err
    again = _train(run, steps=5)
    _, err = again.communicate(timeout=300)
    assert again.returncode == 0, err[-2000:]
    assert f"resuming {run} after step {killed_at}" in err
    steps = [r["step"] for r in read_metrics(run / "metrics.jsonl")]
    assert steps == [1, 2, 3, 4, 5]  # each completed step once, none lost, none twice
    assert latest.read_text().strip() == "step_000005"
    assert not leftovers, f"judge processes outlived the killed trainer: {leftovers}"
