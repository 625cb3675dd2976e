"""A --base-url that is not an OpenAI endpoint (a web page, a proxy's error) stops bench and optimize
at once with one line and exit code 2, before any judge starts (issue 35, part B); optimize never
overwrites an earlier run's report unless told to."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from drkernel.cli import main
from tests.agent.test_cli_bench import RELU_REF, bench_argv


class _Page(BaseHTTPRequestHandler):
    status = 200

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802
        body = b"<html><body>" + b"<p>not an API</p>" * 20 + b"</body></html>"
        self.send_response(self.status)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_POST = do_GET


@pytest.fixture(params=[200, 404], ids=["html_200", "html_404"])
def web_page(request: pytest.FixtureRequest) -> Iterator[str]:
    handler = type("Page", (_Page,), {"status": request.param})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


def test_bench_at_a_web_page_is_one_line_and_exit_2(web_page: str, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "1_p.py").write_text(RELU_REF)
    assert main(bench_argv(suite, tmp_path / "o", web_page)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not an OpenAI-compatible endpoint" in err[0], err
    assert not (tmp_path / "o" / "summary.json").exists()


def test_optimize_at_a_web_page_is_one_line_and_exit_2(web_page: str, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    ref = tmp_path / "relu.py"
    ref.write_text(RELU_REF)
    code = main(["optimize", str(ref), "--model", "stub", "--base-url", web_page, "--executor", "fake",
                 "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "not an OpenAI-compatible endpoint" in err[0], err


def test_optimize_refuses_to_overwrite_an_earlier_run(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    ref = tmp_path / "relu.py"
    ref.write_text(RELU_REF)
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "report.json").write_text("{}")
    code = main(["optimize", str(ref), "--model", "stub", "--base-url", "http://127.0.0.1:1/v1",
                 "--executor", "fake", "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 2 and "--overwrite" in err and (tmp_path / "run" / "report.json").read_text() == "{}"
