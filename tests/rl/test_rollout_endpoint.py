"""`rollout.backend=openai`: the server is checked when the run starts, as bench checks its model's."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from drkernel.cli import main
from drkernel.errors import ConfigError
from drkernel.rl.build import build_sampler
from drkernel.rl.config import RolloutConfig


class _Models(BaseHTTPRequestHandler):
    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802 (http.server naming)
        data = json.dumps({"object": "list", "data": [{"id": "qwen-rl"}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def models_server() -> Iterator[str]:
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Models)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/v1"
    srv.shutdown()
    srv.server_close()


def _dead_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}/v1"


def test_a_rollout_server_that_does_not_answer_stops_the_run_at_start(tmp_path, capsys):
    # the run went on: every episode failed, each step logged reward nan, and it ended with exit code 0
    url = _dead_url()
    with pytest.raises(ConfigError, match=r"does not answer .*: start it, or set rollout.base_url"):
        build_sampler(RolloutConfig(backend="openai", base_url=url), None, None)
    assert main(["train", "rl", "--recipe", "debug_cpu", "--run-dir", str(tmp_path / "run"),
                 "--set", "rollout.backend=openai", "--set", f"rollout.base_url={url}"]) == 2
    err = capsys.readouterr().err
    assert "rollout.base_url" in err and "Traceback" not in err
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_a_rollout_server_of_another_model_names_rollout_served_model(models_server):
    with pytest.raises(ConfigError, match=r"serves qwen-rl, not 'policy': set rollout.served_model"):
        build_sampler(RolloutConfig(backend="openai", base_url=models_server), None, None)
    sampler = build_sampler(RolloutConfig(backend="openai", base_url=models_server, served_model="qwen-rl"),
                            None, None)
    assert sampler.policy.config.model == "qwen-rl"  # type: ignore[attr-defined]


def test_a_rollout_base_url_that_is_no_url_is_refused_with_the_config():
    with pytest.raises(ConfigError, match="rollout.base_url: 'notaurl' is not an http"):
        RolloutConfig(backend="openai", base_url="notaurl")
