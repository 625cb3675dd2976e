"""Run `drkernel serve` as a child process: for notebooks, benchmarks, drills and tests.

Input: serve flags; output: a running server on a free loopback port with its base URL, which
can be stopped politely, killed with SIGKILL (a crash drill) and restarted on the same store.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

from drkernel.errors import ExecutorError

__all__ = ["ServerProcess", "free_port"]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ServerProcess:
    """`with ServerProcess(db_path=..., extra=["--judge", "fake"]) as server: server.url`."""

    def __init__(self, db_path: str | Path, extra: list[str] | None = None,
                 port: int | None = None, env: dict[str, str] | None = None,
                 start_timeout_s: float = 120.0, log_path: str | Path | None = None) -> None:
        self.db_path = str(db_path)
        self.extra = list(extra or [])
        self.port = port or free_port()
        self.env = env
        self.start_timeout_s = start_timeout_s
        self.log_path = Path(log_path) if log_path else Path(self.db_path).with_suffix(".log")
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def start(self) -> ServerProcess:
        cmd = [sys.executable, "-m", "drkernel.cli", "serve", "--host", "127.0.0.1",
               "--port", str(self.port), "--db", self.db_path, "--log-level", "warning",
               *self.extra]
        env = dict(os.environ if self.env is None else self.env)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                                         start_new_session=True)
        self._wait_healthy()
        return self

    def _wait_healthy(self) -> None:
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise ExecutorError(f"drkernel serve exited with {self.proc.returncode}; "
                                    f"see {self.log_path}:\n{self.log_tail()}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return
            time.sleep(0.2)
        self.kill(group=True)
        raise ExecutorError(f"drkernel serve not healthy in {self.start_timeout_s} s; "
                            f"see {self.log_path}")

    def log_tail(self, n: int = 4000) -> str:
        with contextlib.suppress(OSError):
            return self.log_path.read_text(errors="replace")[-n:]
        return ""

    def kill(self, group: bool = False) -> None:
        """SIGKILL the server (a crash, not a shutdown); `group`: its worker processes too."""
        if self.proc and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                if group:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                else:
                    self.proc.kill()
            self.proc.wait(timeout=30)

    def stop(self, timeout_s: float = 30.0) -> None:
        """SIGTERM (graceful: in-flight tasks go back to the queue), then SIGKILL if needed."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.kill()
        if self.proc:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)  # stray children of the group

    def restart(self) -> ServerProcess:
        self.stop()
        return self.start()

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
