"""`drkernel train sft --model M` with a model that cannot be had (issue 35, part B): one line at once, exit
2; before, 52 s of hub retries and a 113-line traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _sft(tmp_path: Path, model: str) -> tuple[int, str, float]:
    data = tmp_path / "data.jsonl"
    data.write_text(json.dumps({"messages": [{"role": "user", "content": "hi"},
                                             {"role": "assistant", "content": "hello"}]}) + "\n")
    # a hub that cannot be reached (nothing listens on port 9) and an empty hub cache
    env = {**os.environ, "HF_ENDPOINT": "http://127.0.0.1:9", "HF_HUB_ETAG_TIMEOUT": "2",
           "HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "0"}
    env.pop("HF_HUB_CACHE", None)
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "drkernel.cli", "train", "sft", "--recipe", "dr_kernel_8b",
                           "--data", str(data), "--model", model, "--out", str(tmp_path / "out")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    return proc.returncode, proc.stderr, time.monotonic() - t0


@pytest.mark.parametrize(("model", "says"), [
    ("{tmp}/no/such/model", "no such folder"),
    ("{tmp}/data.jsonl", "a file, not a model folder"),
    ("{tmp}", "a folder without config.json"),
    ("nobody-here/no-such-model", "the hub (http://127.0.0.1:9) cannot be reached"),
])
def test_a_model_that_cannot_be_had_is_one_line_at_once(tmp_path: Path, model: str, says: str) -> None:
    model = model.format(tmp=tmp_path)
    code, err, took = _sft(tmp_path, model)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1, err[-3000:]
    assert lines[0].startswith(f"drkernel train: model {model}: ") and says in lines[0], lines[0]
    assert took < 30, f"{took:.0f} s"  # the import of torch and transformers; no hub retries


def test_offline_and_not_cached_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from huggingface_hub import constants

    from drkernel.errors import ConfigError
    from drkernel.rl.build import model_source

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "cache"))
    with pytest.raises(ConfigError, match="not in the local hub cache, and HF_HUB_OFFLINE is set"):
        model_source("nobody-here/no-such-model")
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text("{}")
    assert model_source(str(tmp_path / "m")) == "folder"


def test_a_model_folder_transformers_cannot_load_is_the_same_line_for_the_trainer_and_the_agent(
        tmp_path: Path) -> None:
    """The trainer (rl/build.py) and the agent's hf backend each made the line from transformers' first
    line by a copy of their own, in other words; both now load under agent.hf_policy.reword_load_errors."""
    pytest.importorskip("transformers")
    from drkernel.agent.hf_policy import HFPolicy
    from drkernel.errors import ConfigError
    from drkernel.rl.build import load_pretrained

    (tmp_path / "config.json").write_text("{}")  # a model folder by its look, nothing transformers can load
    with pytest.raises(ConfigError) as trainer:
        load_pretrained(str(tmp_path), dtype="float32")
    with pytest.raises(ConfigError) as agent:
        HFPolicy.Config(model_path=str(tmp_path)).build()
    line = str(trainer.value)
    assert line == str(agent.value)
    assert line.startswith(f"model {tmp_path}: cannot load it (") and "\n" not in line
