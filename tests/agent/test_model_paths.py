"""A --tokenizer or an `--backend hf` --model that names no tokenizer or model is one line on stderr and
exit code 2, before any turn is asked for (it was a transformers traceback, for --tokenizer only once
the first prompt was counted)."""

from __future__ import annotations

from pathlib import Path

import pytest

from drkernel.cli import main
from tests.agent.agent_fixtures import RELU_REF

pytest.importorskip("transformers")


def _optimize(tmp_path: Path, *extra: str) -> list[str]:
    ref = tmp_path / "relu.py"
    ref.write_text(RELU_REF)
    return ["optimize", str(ref), "--executor", "fake", "--turns", "1", "--out", str(tmp_path / "run"),
            *extra]


@pytest.mark.parametrize("where", ["missing", "empty_folder"])
def test_a_tokenizer_that_cannot_load_is_one_line(where, chat_server, tmp_path, capsys):
    srv = chat_server(lambda messages: "no code")
    path = tmp_path / "nothing" if where == "missing" else tmp_path
    code = main(_optimize(tmp_path, "--model", "stub", "--base-url", srv.base_url, "--tokenizer", str(path),
                          "--prompt-budget", "4000"))
    err = [line for line in capsys.readouterr().err.splitlines() if not line.startswith("warning:")]
    assert code == 2 and len(err) == 1 and f"tokenizer {path}" in err[0], err
    assert srv.requests == []  # refused before the model was asked anything


@pytest.mark.parametrize("where", ["missing", "empty_folder"])
def test_an_hf_model_that_cannot_load_is_one_line(where, tmp_path, capsys):
    path = tmp_path / "nothing" if where == "missing" else tmp_path
    code = main(_optimize(tmp_path, "--backend", "hf", "--model", str(path)))
    err = capsys.readouterr().err.splitlines()
    assert code == 2 and len(err) == 1 and f"model {path}" in err[0], err


def test_a_tokenizer_beside_a_local_model_is_refused_not_ignored(tmp_path, capsys):
    """`--backend hf --tokenizer T` used the model's own tokenizer and said nothing of T."""
    argv = _optimize(tmp_path, "--backend", "hf", "--model", str(tmp_path), "--tokenizer", str(tmp_path))
    code = main(argv)
    err = capsys.readouterr().err.splitlines()
    assert code == 2 and err == ["drkernel optimize: --tokenizer is for --backend openai (a served model); "
                                 "--backend hf uses the tokenizer of --model's folder"], err


def test_a_prompt_budget_past_the_context_is_refused_under_ours_not_paper(chat_server, tmp_path, capsys):
    """--tts (a 20,480-token budget) with --max-model-len 16384: prompts shrunk to the budget left
    answers max_tokens 1, each turn sent and wasted. The authors' protocol ends such a turn instead."""
    code = main(_optimize(tmp_path, "--model", "m", "--tts", "--max-model-len", "16384"))
    err = capsys.readouterr().err.splitlines()
    assert code == 2 and len(err) == 1 and "--prompt-budget: 20480 prompt tokens leave no room" in err[0], err
    srv = chat_server(lambda messages: "no code")
    paper = _optimize(tmp_path, "--model", "stub", "--base-url", srv.base_url, "--tts", "--max-model-len",
                      "16384", "--protocol", "paper", "--overwrite")
    assert main(paper) == 0  # the pair is valid there: the run goes on (no verified kernel)
    assert "leave no room" not in capsys.readouterr().err


def _offline_env(tmp_path: Path) -> dict[str, str]:
    """A hub that cannot be reached (nothing listens on port 9) and an empty hub cache."""
    import os

    env = {**os.environ, "HF_ENDPOINT": "http://127.0.0.1:9", "HF_HUB_ETAG_TIMEOUT": "2",
           "HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "0"}
    env.pop("HF_HUB_CACHE", None)
    return env


@pytest.mark.parametrize("what", ["tokenizer", "model"])
def test_a_hub_name_with_no_hub_is_one_line_at_once(what, chat_server, tmp_path):
    """`--tokenizer org/name` or `--backend hf --model org/name` with the hub out of reach and nothing
    cached: transformers' download retries took about 52 s before the line (the trainer asked
    model_source first; the agent did not)."""
    import subprocess
    import sys
    import time

    name = "nobody-here/no-such-thing"
    if what == "tokenizer":
        srv = chat_server(lambda messages: "no code")
        extra = ["--model", "stub", "--base-url", srv.base_url, "--tokenizer", name]
    else:
        extra = ["--backend", "hf", "--model", name]
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "drkernel.cli", *_optimize(tmp_path, *extra)],
                          cwd=Path(__file__).resolve().parents[2], env=_offline_env(tmp_path),
                          capture_output=True, text=True, timeout=120)
    took = time.monotonic() - t0
    lines = [line for line in proc.stderr.splitlines() if line.strip() and not line.startswith("warning:")]
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr[-3000:]
    assert f"{what} {name}: " in lines[0] and "cannot be reached" in lines[0], lines[0]
    assert took < 30, f"{took:.0f} s"  # the imports of torch and transformers; no hub retries
