"""`drkernel serve --executor ray` without a cluster (issue 35, part B): one line and exit code 2, no
uvicorn traceback."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from drkernel.cli import main
from drkernel.errors import ExecutorError

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_an_address_where_no_cluster_listens_is_one_line_at_once(tmp_path: Path) -> None:
    pytest.importorskip("ray")
    address = f"127.0.0.1:{_free_port()}"
    argv = ["serve", "--executor", "ray", "--address", address, "--host", "127.0.0.1",
            "--port", str(_free_port()), "--db", str(tmp_path / "s.db")]
    proc = subprocess.run([sys.executable, "-m", "drkernel.cli", *argv], cwd=ROOT, capture_output=True,
                          text=True, timeout=30)  # ray.init alone waits 40 s and more
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(f"drkernel serve: no Ray cluster at {address} (") and "ray start --head" in last


def test_no_running_cluster_for_auto_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    from drkernel.server import app

    def no_cluster(settings: object) -> None:
        raise ExecutorError("ray.init: ConnectionError: Could not find any running Ray instance. Please "
                            "specify the one to connect to by setting `--address` flag")

    monkeypatch.setattr(app, "default_executor", no_cluster)
    monkeypatch.setattr("drkernel.executors.ray.check_ray_auth", lambda *a, **k: None)
    assert main(["serve", "--executor", "ray", "--address", "auto", "--port", str(_free_port()),
                 "--db", str(tmp_path / "s.db")]) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last == ("drkernel serve: --executor ray --address auto: no Ray cluster runs here: start one "
                    "with `ray start --head` (and `ray start --address HEAD:6379` on the other nodes), or "
                    "leave out --address for a private one on this machine")
