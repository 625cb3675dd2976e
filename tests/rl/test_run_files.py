"""A run folder's config.json and metrics.jsonl, rewritten when a run starts or resumes, are whole or
old: a write that fails half-way (here the file-size limit, as a full disk) truncated them in place, and
the next --resume found no config to compare, or the metrics of the steps already run gone."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from drkernel.recipes import debug_cpu
from drkernel.rl.config import load_config, save_config
from drkernel.rl.runlog import read_metrics

ROOT = Path(__file__).resolve().parents[2]


def _under_a_size_limit(code: str, limit_bytes: int) -> subprocess.CompletedProcess[str]:
    """Run `code` in a Python whose files may not grow past `limit_bytes` (writes past it fail EFBIG)."""
    prelude = ("import resource, signal\nsignal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
               f"resource.setrlimit(resource.RLIMIT_FSIZE, ({limit_bytes}, {limit_bytes}))\n")
    return subprocess.run([sys.executable, "-c", prelude + code], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)


def test_a_config_that_fails_half_way_leaves_the_old_one(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    save_config(debug_cpu(), path)
    before = path.read_text()
    proc = _under_a_size_limit("from drkernel.recipes import debug_cpu\nfrom drkernel.rl.config import "
                               f"save_config\nsave_config(debug_cpu(), {str(path)!r})\n", 200)
    assert proc.returncode != 0 and "File too large" in proc.stderr, proc.stderr[-2000:]
    assert path.read_text() == before and load_config(path) == debug_cpu()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json"]


def test_metrics_cut_to_the_resumed_step_that_fail_half_way_leave_the_old_file(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    rows = [{"step": s, "loss": 0.5, "note": "x" * 100} for s in (1, 2, 3)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    proc = _under_a_size_limit("from drkernel.rl.runlog import RunLog\n"
                               f"RunLog({str(tmp_path)!r}, resume_step=2, tensorboard=False)\n", 100)
    assert proc.returncode != 0 and "File too large" in proc.stderr, proc.stderr[-2000:]
    assert read_metrics(path) == rows
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics.jsonl"]
