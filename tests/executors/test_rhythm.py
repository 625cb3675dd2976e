"""bench/rhythm.py at CI size (issue 33): bursts with idle time between them, on the local executor
(judge processes whose heartbeat socket fills in under a second of idling, as a real one does in
about a minute) and on the Ray executor. Target: no infra_error, no retry, no worker lost."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "rhythm.py"


def rhythm():  # noqa: ANN201 - the bench script as a module
    spec = importlib.util.spec_from_file_location("drkernel_bench_rhythm", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_rhythm_on_the_local_executor_costs_nothing(tmp_path: Path) -> None:
    out = tmp_path / "local.json"
    code = rhythm().main(["--executor", "local", "--judge", "fake", "--workers", "2", "--burst", "8",
                          "--idle-s", "3", "--rounds", "3", "--heartbeat-timeout-s", "0.5",
                          "--lifeline-buffer", "4096", "--json", str(out)])
    summary = json.loads(out.read_text())
    assert code == 0
    assert (summary["infra_error"], summary["retries"], summary["workers_restarted"]) == (0, 0, 0)
    assert [r["ok"] for r in summary["rounds"]] == [8, 8, 8]


def test_the_rhythm_on_the_ray_executor_costs_nothing(ray_cluster: None, tmp_path: Path) -> None:
    pytest.importorskip("ray")
    out = tmp_path / "ray.json"
    code = rhythm().main(["--executor", "ray", "--judge", "fake", "--workers", "2", "--burst", "8",
                          "--idle-s", "3", "--rounds", "2", "--json", str(out)])
    summary = json.loads(out.read_text())
    assert code == 0
    assert (summary["infra_error"], summary["retries"], summary["workers_restarted"]) == (0, 0, 0)
