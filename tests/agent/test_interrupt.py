"""Ctrl-C (issue 35, part B): `drkernel bench` stops within seconds while a model's answer and a judge's
verdict are still in flight, without a traceback from any process of its group, and says the exact
command that continues the run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.agent.agent_fixtures import RELU_REF, answer, relu_kernel
from tests.processes import running, terminal_signals

pytest.importorskip("drkernel.sandbox.judge")
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def _group(pgid: int) -> list[int]:
    """The live processes of process group `pgid`."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[2]) == pgid:
                    pids.append(int(entry.name))
            except (OSError, ValueError, IndexError):
                continue
    return [p for p in pids if running(p)]


def test_ctrl_c_stops_bench_at_once_and_names_the_command_that_resumes(chat_server, tmp_path):
    def script(msgs):
        if sum(m["role"] == "assistant" for m in msgs):  # a later turn: the model thinks for a long time
            time.sleep(60)
        return answer(relu_kernel(1024))

    srv = chat_server(script)
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "1_relu.py").write_text(RELU_REF)
    out = tmp_path / "bench"
    argv = ["bench", str(suite), "--model", "stub", "--base-url", srv.base_url, "--samples", "3",
            "--turns", "2", "--out", str(out), "--no-progress", "--concurrency", "3",
            "--executor", "local", "--device", "cpu", "--workers", "1", "--perf-trials", "2"]
    # a terminal's Ctrl-C: SIGINT to the whole foreground process group (the judges are in it)
    proc = subprocess.Popen([sys.executable, "-m", "drkernel.cli", *argv], cwd=ROOT, start_new_session=True,
                            preexec_fn=terminal_signals,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 240
        # one episode waits on the model's second answer while the judge works on another's first kernel
        while len(srv.requests) < 4 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        time.sleep(0.5)
        os.killpg(proc.pid, signal.SIGINT)
        sent = time.monotonic()
        _, err = proc.communicate(timeout=60)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert took < 8, f"took {took:.1f} s to stop"
    assert proc.returncode == 130
    assert "Traceback" not in err, err[-3000:]
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("drkernel bench: interrupted after 0 of 3 episodes")
    assert lines[0].endswith(f"to continue: drkernel {' '.join(argv)} --resume")
    end = time.monotonic() + 10
    while _group(proc.pid) and time.monotonic() < end:
        time.sleep(0.2)
    assert not _group(proc.pid), "judge processes outlived the interrupted bench"
    assert (out / "summary.json").exists()
