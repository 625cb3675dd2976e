"""Ctrl-C in `drkernel train rl` (issue 35, part B): one line that says which step is checkpointed and the
exact command that resumes from it, no traceback."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.processes import terminal_signals

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def test_ctrl_c_says_the_command_that_resumes(tmp_path):
    run = tmp_path / "run"
    argv = ["train", "rl", "--recipe", "debug_cpu", "--run-dir", str(run), "--set", "trainer.steps=50",
            "--set", "trainer.validate_every=0", "--set", "judge.executor=fake"]
    proc = subprocess.Popen([sys.executable, "-m", "drkernel.cli", *argv], cwd=ROOT, start_new_session=True,
                            preexec_fn=terminal_signals,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        ready, _, _ = select.select([proc.stdout], [], [], 240)
        assert ready and proc.stdout.readline().startswith("step 1: reward"), proc.communicate()[1][-3000:]
        time.sleep(1)  # within a later step
        os.killpg(proc.pid, signal.SIGINT)
        sent = time.monotonic()
        _, err = proc.communicate(timeout=60)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert took < 8 and proc.returncode == 130
    assert "Traceback" not in err, err[-3000:]
    last = err.strip().splitlines()[-1]
    saved = (run / "checkpoints" / "latest").read_text().strip()  # step 1 or a later one, as fast as it ran
    step = int(saved.split("_")[1])
    assert step >= 1
    assert last.startswith(f"drkernel train rl: interrupted; step {step} is checkpointed in "
                           f"{run / 'checkpoints' / saved}; "), last
    assert last.endswith(f"to resume from it: drkernel train rl --recipe debug_cpu --run-dir {run} "
                         "--set trainer.steps=50 --set trainer.validate_every=0 --set judge.executor=fake")
