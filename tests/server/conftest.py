"""Fixtures for server tests: the app served by uvicorn in a thread, on a free loopback port."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from drkernel.executors.fake_judge import fake_judge
from drkernel.executors.local import LocalExecutor
from drkernel.server.app import ExecutorFactory, create_app
from drkernel.server.launch import free_port
from drkernel.server.settings import Settings


class ThreadServer:
    def __init__(self, settings: Settings, isolation: str = "thread", workers: int = 2,
                 judge: Callable[[str], Any] = fake_judge, executor: ExecutorFactory | None = None) -> None:
        config = LocalExecutor.Config(devices=("cpu",) * workers, isolation=isolation)
        app = create_app(settings, executor or (lambda s: LocalExecutor(config, judge)))
        self.app = app
        self.port = free_port()
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port,
                                                    log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            assert time.monotonic() < deadline and self.thread.is_alive(), "server did not start"
            time.sleep(0.05)
        self.url = f"http://127.0.0.1:{self.port}"
        self.http = httpx.Client(base_url=self.url, timeout=30)

    def close(self) -> None:
        self.http.close()
        self.server.should_exit = True
        self.thread.join(timeout=30)


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[..., ThreadServer]]:
    servers: list[ThreadServer] = []

    def start(isolation: str = "thread", workers: int = 2, judge: Callable[[str], Any] = fake_judge,
              executor: ExecutorFactory | None = None, **settings: object) -> ThreadServer:
        settings.setdefault("db_path", str(tmp_path / f"db{len(servers)}.sqlite"))
        s = Settings(**settings)  # type: ignore[arg-type]
        servers.append(ThreadServer(s, isolation, workers, judge, executor))
        return servers[-1]

    yield start
    for server in servers:
        server.close()
