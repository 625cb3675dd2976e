"""Fixtures of the agent tests: a small problem and a stub OpenAI-compatible chat server."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from drkernel.types import Problem
from tests.agent.agent_fixtures import RELU_REF


@pytest.fixture
def relu_problem() -> Problem:
    return Problem(name="relu", reference_code=RELU_REF, level=1)


Script = Callable[[list[dict[str, str]]], str]


class _Handler(BaseHTTPRequestHandler):
    server: Any

    def log_message(self, *args: Any) -> None:  # keep test output clean
        pass

    def do_GET(self) -> None:  # noqa: N802 (http.server naming)
        if self.path.endswith("/models"):
            self._send(200, {"object": "list", "data": [{"id": "stub", "object": "model"}]})
        else:
            self._send(404, {"error": "not found"})

    def do_POST(self) -> None:  # noqa: N802 (http.server naming)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.requests.append(body)
        if not self.path.endswith("/chat/completions"):
            self._send(404, {"error": "not found"})
            return
        with self.server.lock:
            fail = self.server.fail_next > 0
            self.server.fail_next -= fail
        if fail:
            self._send(self.server.fail_status, {"error": "unavailable"})
            return
        choices = []
        for i in range(int(body.get("n", 1))):
            text = self.server.script(body["messages"])
            words = text.split(" ")[:50]
            lp = {"content": [{"token": w, "logprob": -0.5, "top_logprobs": []} for w in words]}
            choices.append(
                {
                    "index": i,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": "stop",
                    "logprobs": lp if body.get("logprobs") else None,
                }
            )
        usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
        self._send(200, {"id": "x", "object": "chat.completion", "choices": choices, "usage": usage})

    def _send(self, code: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def chat_server() -> Iterator[Callable[[Script], Any]]:
    """Start a stub OpenAI-compatible server on 127.0.0.1 answering with `script(messages)`."""
    servers: list[ThreadingHTTPServer] = []

    def start(script: Script, fail_next: int = 0, fail_status: int = 503) -> Any:
        srv = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        srv.script = script  # type: ignore[attr-defined]
        srv.requests = []  # type: ignore[attr-defined]
        srv.fail_next = fail_next  # type: ignore[attr-defined]
        srv.fail_status = fail_status  # type: ignore[attr-defined]
        srv.lock = threading.Lock()  # type: ignore[attr-defined]
        srv.base_url = f"http://127.0.0.1:{srv.server_address[1]}/v1"  # type: ignore[attr-defined]
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        servers.append(srv)
        return srv

    yield start
    for srv in servers:
        srv.shutdown()
        srv.server_close()
