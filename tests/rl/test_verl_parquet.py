"""`drkernel train parquet SUITE --out FILE` writes verl's RL parquet from any suite (issue 34, blocker 6)."""

from __future__ import annotations

import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from drkernel.agent.env import KernelEnv
from drkernel.cli import main
from drkernel.executors.fake import FakeExecutor
from drkernel.problems import load_suite
from drkernel.problems.suite import builtin_problem

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

ROOT = Path(__file__).resolve().parents[2]
REF = builtin_problem("101_ReLU", "cpu").reference_code


def _read(path: Path) -> list[dict]:
    return pq.read_table(path).to_pylist()


def _kernelbench(root: Path) -> Path:
    for level in (1, 2):
        d = root / "KernelBench" / f"level{level}"
        d.mkdir(parents=True)
        for i in (1, 2):
            (d / f"{i}_Op.py").write_text(REF)
    return root


def _authors_parquet(path: Path) -> Path:
    """Rows in the layout of the authors' RL data (hkust-nlp/drkernel-rl-data)."""
    rows = [{"data_source": "cuda_llm", "prompt": [{"role": "user", "content": f"optimize {i}"}],
             "reward_model": {"style": "rule", "ground_truth": REF},
             "extra_info": {"entry_point": "Model", "uuid": f"uuid-{i}", "level": 1, "module_name": f"m{i}"}}
            for i in range(3)]
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def test_builtin_suite_rows_carry_the_problem_and_its_first_prompt(tmp_path, capsys):
    out = tmp_path / "data" / "train.parquet"
    assert main(["train", "parquet", "builtin", "--out", str(out)]) == 0
    assert "wrote 25 problems" in capsys.readouterr().out
    rows = _read(out)
    problems = load_suite("builtin")
    assert len(rows) == len(problems) == 25
    for i, (row, p) in enumerate(zip(rows, problems, strict=True)):
        assert row["data_source"] == "drkernel" and row["agent_name"] == "drkernel_kernel"
        assert row["extra_info"]["index"] == i
        assert row["extra_info"]["problem"] == {"name": p.name, "reference_code": p.reference_code,
                                                "entry_point": p.entry_point, "level": p.level}
        env = KernelEnv(p, FakeExecutor())
        env.reset()
        assert row["prompt"] == [dict(m) for m in env.observation]  # what the agent loop sends first


@pytest.mark.parametrize("kind", ["kernelbench", "authors"])
def test_other_suites(tmp_path, kind, capsys):
    spec = (_kernelbench(tmp_path / "kb") if kind == "kernelbench"
            else _authors_parquet(tmp_path / "cuda_llm_rl.parquet"))
    out = tmp_path / "out.parquet"
    args = ["train", "parquet", str(spec), "--out", str(out)]
    if kind == "kernelbench":
        args += ["--levels", "2"]
    assert main(args) == 0, capsys.readouterr().err
    names = [r["extra_info"]["problem"]["name"] for r in _read(out)]
    assert names == (["L2/1_Op", "L2/2_Op"] if kind == "kernelbench" else ["uuid-0", "uuid-1", "uuid-2"])
    assert main(["train", "parquet", str(spec), "--out", str(out), "--overwrite", "--limit", "1"]) == 0
    assert len(_read(out)) == 1


@pytest.mark.parametrize("args, words", [
    (["/no/such/suite", "--out", "{tmp}/x.parquet"], "no such file or folder"),
    (["builtin", "--out", "{tmp}/x.csv"], "must name a .parquet file"),
    (["builtin", "--out", "{tmp}/exists.parquet"], "already exists (--overwrite replaces it)"),
    (["builtin", "--out", "{tmp}/x.parquet", "--problems", "nope"], "not in suite 'builtin': nope"),
    (["builtin", "--out", "{tmp}/x.parquet", "--limit", "0"], "--limit: must be at least 1"),
    (["builtin", "--out", "{tmp}/x.parquet", "--levels", "7"], "expected KernelBench levels 1 to 4"),
])
def test_bad_input_is_one_line_without_a_traceback(tmp_path, args, words):
    (tmp_path / "exists.parquet").write_bytes(b"")
    argv = [a.replace("{tmp}", str(tmp_path)) for a in args]
    proc = subprocess.run([sys.executable, "-m", "drkernel.cli", "train", "parquet", *argv], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and words in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) <= 2, proc.stderr
    assert not (tmp_path / "x.parquet").exists()


@pytest.mark.parametrize("stop, code", [(KeyboardInterrupt, 130), (OSError(28, "No space left"), 2)])
def test_a_write_stopped_midway_leaves_the_old_file_whole(tmp_path, monkeypatch, capsys, stop, code):
    # pyarrow wrote --out in place: a Ctrl-C or a full disk mid-write left a torn file where the old
    # one had been, which verl then failed to read and which a rerun without --overwrite refused
    out = tmp_path / "train.parquet"
    assert main(["train", "parquet", "builtin", "--out", str(out), "--limit", "2"]) == 0
    before = out.read_bytes()

    def torn(table, where, **kwargs):
        Path(where).write_bytes(before[:10])
        raise stop

    monkeypatch.setattr(pq, "write_table", torn)
    assert main(["train", "parquet", "builtin", "--out", str(out), "--limit", "1", "--overwrite"]) == code
    assert out.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == ["train.parquet"]
    assert "Traceback" not in capsys.readouterr().err


def test_verls_dataset_and_the_agent_loop_read_the_file(tmp_path):
    pytest.importorskip("verl")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from omegaconf import OmegaConf
        from verl.utils.dataset.rl_dataset import RLHFDataset

        from drkernel.rl.verl.agent_loop import AGENT_NAME, problem_from_row
        from tests.rl.test_verl_golden import _tiny

    out = tmp_path / "train.parquet"
    assert main(["train", "parquet", "builtin", "--out", str(out), "--limit", "3"]) == 0
    _, tok = _tiny()
    data = OmegaConf.create({"max_prompt_length": 10240, "filter_overlong_prompts": True,
                             "filter_overlong_prompts_workers": 1, "return_raw_chat": True})
    dataset = RLHFDataset(data_files=[str(out)], tokenizer=tok, config=data, processor=None)
    assert len(dataset) == 3
    expected = load_suite("builtin")[:3]
    for i, p in enumerate(expected):
        row = dataset[i]
        assert row["agent_name"] == AGENT_NAME and row["index"] == i
        assert problem_from_row(row) == p.__class__(name=p.name, reference_code=p.reference_code,
                                                    entry_point=p.entry_point, level=p.level)
