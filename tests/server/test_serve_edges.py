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


def _no_judges(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Judges that must not start: `serve` refuses what it can check before it starts any."""
    from drkernel.server import app

    started: list[object] = []
    monkeypatch.setattr(app, "default_executor", started.append)
    return started


def _damaged_store(db: Path) -> None:
    """A task store whose pages past its header were overwritten (a disk fault, a copy cut short):
    SQLite opens it and reads its schema, and the first query of the tasks fails."""
    from drkernel.server.store import NewTask, TaskStore
    from drkernel.types import EvalRequest

    store = TaskStore(str(db))
    store.submit([NewTask(EvalRequest(reference_code="r", kernel_code="k" * 5000 + str(i), task_id=f"t{i}"))
                  for i in range(50)])
    store.close()  # the last connection: the WAL is checkpointed into the file
    with open(db, "r+b") as f:
        f.seek(4096 * 3)
        f.write(b"\xa5" * 4096 * 4)


@pytest.mark.parametrize("case", ["port in use", "db is a folder", "db is not a database", "db is damaged",
                                  "bad host"])
def test_what_serve_can_check_is_one_line_before_any_judge_starts(
        case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A port in use was uvicorn's multi-line error and exit code 3 after every judge had started; a --db
    that SQLite cannot open was a traceback and 'Application startup failed'; an unresolvable --host a
    UnicodeError traceback; a damaged one, that opens but fails its first query, a traceback and exit 3."""
    started = _no_judges(monkeypatch)
    port, db, host = _free_port(), tmp_path / "s.db", "127.0.0.1"
    with socket.socket() as busy:
        if case == "port in use":
            busy.bind(("127.0.0.1", 0))
            busy.listen()
            port = busy.getsockname()[1]
        elif case == "db is a folder":
            db.mkdir()
        elif case == "db is not a database":
            db.write_bytes(b"\xff" * 4096)
        elif case == "db is damaged":
            _damaged_store(db)
        else:
            host = "bad..host"
        code = main(["serve", "--judge", "fake", "--host", host, "--port", str(port), "--db", str(db)])
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and not started, lines
    assert lines[-1].startswith("drkernel serve: ") and "Traceback" not in "\n".join(lines), lines
    assert ("--port" if case == "port in use" else "--host" if case == "bad host" else "--db") in lines[-1]


def test_a_log_level_uvicorn_does_not_know_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["serve", "--judge", "fake", "--log-level", "bogus"])
    assert info.value.code == 2 and "--log-level" in capsys.readouterr().err
