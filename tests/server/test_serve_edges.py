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


_FIRST_SUBMIT = r'''
import sys, time
from fastapi.testclient import TestClient
from drkernel.server.app import create_app
from drkernel.server.settings import Settings
from drkernel.types import EvalOptions, EvalRequest
settings = Settings.from_env(db_path=":memory:", judge="fake", devices=("cpu",), num_workers=1)
with TestClient(create_app(settings)) as client:
    before = "torch" in sys.modules
    request = EvalRequest(reference_code="import torch\n", kernel_code="# fake: ok\n", options=EvalOptions(),
                          task_id="first")
    started = time.monotonic()
    answer = client.post("/v1/tasks", json=request.to_dict())
    print(answer.status_code, before, "torch" in sys.modules, round(time.monotonic() - started, 2))
'''


def test_a_servers_first_submission_imports_no_torch_in_its_event_loop() -> None:
    """Each submission is checked (sandbox/requestcheck.py) in the server's event loop. The check lived
    in sandbox/judge.py, which imports torch: a fresh server's first submission waited for torch
    to import (1.5 s on a 2-core CPU host, every request and /health stalled behind it), and the
    first burst of an RL step paid it."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", _FIRST_SUBMIT], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    status, before, after, _seconds = out.stdout.split()[-4:]
    assert status == "202" and before == "False", out.stdout
    assert after == "False", f"the first submission imported torch: {out.stdout}"


def test_a_store_whose_tasks_table_lacks_a_column_is_one_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A --db whose `tasks` table was written by another program or version (here without `meta`) passed
    the start's check: the server then answered every submission 503 'no such column: meta', which
    the clients retry, and never judged anything."""
    import sqlite3

    from drkernel.server.store import TaskStore

    db = tmp_path / "other.db"
    with sqlite3.connect(db) as con:
        con.execute("CREATE TABLE tasks (seq INTEGER PRIMARY KEY, task_id TEXT, state TEXT, priority TEXT, "
                    "request TEXT, fingerprint TEXT, result TEXT, attempts INTEGER, worker TEXT, "
                    "submitted_at REAL, started_at REAL, finished_at REAL)")
    con.close()
    with pytest.raises(sqlite3.DatabaseError, match="no column meta: written by another"):
        TaskStore(str(db))
    started = _no_judges(monkeypatch)
    assert main(["serve", "--judge", "fake", "--port", str(_free_port()), "--db", str(db)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert not started and lines[-1].startswith(f"drkernel serve: --db {db}: cannot open it"), lines
    assert "no column meta" in lines[-1]


@pytest.mark.parametrize(("flags", "named"), [
    (["--address", "127.0.0.1:6379"], "--address 127.0.0.1:6379 names a Ray cluster: add --executor ray"),
    (["--executor", "ray", "--devices", "cuda:1"], "--devices: the local executor's"),
    (["--executor", "ray", "--isolation", "thread"], "--isolation: the local executor's")])
def test_a_flag_the_executor_would_ignore_is_a_usage_error(
        flags: list[str], named: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """`serve --address HOST:6379` without --executor ray started a local pool on this machine; --devices
    and --isolation thread with Ray were dropped; each without a word."""
    from drkernel.server import app

    def must_not_start(settings: object) -> None:
        raise AssertionError("judges started")

    monkeypatch.setattr(app, "default_executor", must_not_start)
    monkeypatch.setattr("drkernel.executors.ray.check_ray_address", lambda *a, **k: None)
    monkeypatch.setattr("drkernel.executors.ray.check_ray_auth", lambda *a, **k: None)
    argv = ["serve", "--judge", "fake", "--port", str(_free_port()), "--db", str(tmp_path / "s.db"), *flags]
    assert main(argv) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("drkernel serve: ") and named in lines[0], lines


def test_a_store_of_a_newer_version_with_a_required_column_is_refused_at_open(tmp_path: Path) -> None:
    """A newer version's tasks table with a NOT NULL column this one does not fill opened, and then every
    submission failed its INSERT with an IntegrityError: a 500 'internal error: IntegrityError'."""
    import sqlite3

    from drkernel.server.store import _SCHEMA, TaskStore

    for extra, refused in (("tenant TEXT NOT NULL DEFAULT 'x'", False), ("shard INTEGER NOT NULL", True)):
        db = str(tmp_path / f"{extra.split()[0]}.db")
        with sqlite3.connect(db) as con:
            con.executescript(_SCHEMA.replace("DEFAULT '{}'\n", f"DEFAULT '{{}}',\n    {extra}\n"))
        con.close()
        if refused:
            with pytest.raises(sqlite3.DatabaseError, match="needs column shard, which this"):
                TaskStore(db)
        else:  # a column with a default: this version's rows get it
            TaskStore(db).close()


def test_a_second_server_on_the_same_store_is_one_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A second `drkernel serve` on the --db of a running one started: it re-queued the first server's
    running tasks and judged them again beside it (attempts 2, two judges on one task), and the two queues
    raced for every task after. A server holds its store for its life (kill -9 lets go of it)."""
    import sqlite3

    from drkernel.server.store import TaskStore

    db = str(tmp_path / "s.db")
    first = TaskStore(db, exclusive=True)
    try:
        with pytest.raises(sqlite3.OperationalError, match="serves from it: one server per task store"):
            TaskStore(db, exclusive=True)
        TaskStore(db).close()  # a reader that serves nothing (a test, a report) still opens it
        started = _no_judges(monkeypatch)
        assert main(["serve", "--judge", "fake", "--port", str(_free_port()), "--db", db]) == 2
        lines = capsys.readouterr().err.strip().splitlines()
        assert not started and lines[-1] == (f"drkernel serve: --db {db}: cannot open it as the task store: "
                                             "another process (a drkernel serve?) serves from it: one server "
                                             "per task store"), lines
    finally:
        first.close()
    TaskStore(db, exclusive=True).close()  # free again once the first one closed
