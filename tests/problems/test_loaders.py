"""Loaders: KernelBench checkouts, folders, JSONL, RL parquet rows; clear errors for bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from drkernel.errors import ProblemError
from drkernel.problems.loaders import (
    load_folder,
    load_jsonl,
    load_kernelbench,
    load_problem_file,
    load_rl_parquet,
    load_suite,
    problem_from_record,
)
from drkernel.problems.suite import builtin_problem

REF = builtin_problem("101_ReLU", "cpu").reference_code


def _kernelbench(tmp_path: Path) -> Path:
    for level in (1, 2, 3, 4):
        d = tmp_path / "KernelBench" / f"level{level}"
        d.mkdir(parents=True)
        for i in (2, 10, 1):
            (d / f"{i}_Op.py").write_text(REF)
    return tmp_path


def test_kernelbench_checkout_levels_1_to_3_in_natural_order(tmp_path: Path) -> None:
    root = _kernelbench(tmp_path)
    problems = load_kernelbench(root)
    assert [p.name for p in problems[:3]] == ["L1/1_Op", "L1/2_Op", "L1/10_Op"]
    assert [p.level for p in problems] == [1] * 3 + [2] * 3 + [3] * 3
    assert problems[0].metadata["suite"] == "kernelbench"
    assert [p.level for p in load_kernelbench(root / "KernelBench", levels=[2])] == [2, 2, 2]
    assert len(load_suite(str(root))) == 9  # level 4 is skipped when no level is asked for


def test_kernelbench_level4_is_refused_with_the_reason(tmp_path: Path) -> None:
    root = _kernelbench(tmp_path)
    with pytest.raises(ProblemError, match="model downloads"):
        load_kernelbench(root, levels=[3, 4])
    with pytest.raises(ProblemError, match="level 4"):
        load_suite(str(root), levels=(4,))


def test_kernelbench_errors_name_the_folder(tmp_path: Path) -> None:
    with pytest.raises(ProblemError, match="no level1..level3 folders"):
        load_kernelbench(tmp_path)
    (tmp_path / "level1").mkdir()
    with pytest.raises(ProblemError, match="level\\(s\\) 2"):
        load_kernelbench(tmp_path, levels=[1, 2])


def test_folder_skips_invalid_files_unless_strict(tmp_path: Path) -> None:
    (tmp_path / "good.py").write_text(REF)
    (tmp_path / "bad.py").write_text("class Model:\n    pass\n")
    (tmp_path / "broken.py").write_text("def (:\n")
    (tmp_path / "_private.py").write_text("x = 1\n")
    assert [p.name for p in load_folder(tmp_path)] == ["good"]
    with pytest.raises(ProblemError, match="bad.py: not KernelBench format: missing def get_inputs"):
        load_folder(tmp_path, strict=True)
    with pytest.raises(ProblemError, match="broken.py: syntax error at line 1"):
        load_problem_file(tmp_path / "broken.py")
    with pytest.raises(ProblemError, match="cannot read"):
        load_problem_file(tmp_path / "missing.py")
    assert [p.name for p in load_suite(str(tmp_path))] == ["good"]
    assert load_suite(str(tmp_path / "good.py"))[0].reference_code == REF


def _rl_row(i: int) -> dict:
    return {
        "data_source": "cuda_llm",
        "prompt": [{"role": "user", "content": f"optimize problem {i}"}],
        "reward_model": {"style": "rule", "ground_truth": REF},
        "extra_info": {"entry_point": "Model", "uuid": f"uuid-{i}", "level": 1, "module_name": f"m{i}",
                       "ops": "['relu']", "original_prompt": "..."},
    }


def test_rl_record_and_jsonl(tmp_path: Path) -> None:
    p = problem_from_record(_rl_row(3), "row 3")
    assert (p.name, p.level, p.entry_point, p.reference_code) == ("uuid-3", 1, "Model", REF)
    assert p.metadata["prompt"][0]["role"] == "user" and p.metadata["extra_module_name"] == "m3"
    path = tmp_path / "problems.jsonl"
    lines = [json.dumps({"name": "a", "reference_code": REF, "shape_variants": ["dim = 3"]}), "",
             json.dumps(_rl_row(1))]
    path.write_text("\n".join(lines) + "\n")
    problems = load_jsonl(path)
    assert [p.name for p in problems] == ["a", "uuid-1"] and problems[0].shape_variants == ("dim = 3",)
    assert [p.name for p in load_suite(str(path))] == ["a", "uuid-1"]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", "problems.jsonl:1: not JSON"),
        ("[1, 2]", "expected a JSON object"),
        (json.dumps({"name": "x"}), "problems.jsonl:1: no reference code"),
        (json.dumps({"code": REF}), "no problem name"),
        (json.dumps({"name": "x", "code": "import torch\n"}), "missing class Model"),
        (json.dumps({"name": "x", "code": REF, "entry_point": "Net"}), "missing class Net"),
    ],
)
def test_jsonl_errors_are_clear(tmp_path: Path, line: str, message: str) -> None:
    path = tmp_path / "problems.jsonl"
    path.write_text(line + "\n")
    with pytest.raises(ProblemError, match=message):
        load_jsonl(path)


@pytest.mark.parametrize("variants", ["dim = 3", 5, ["dim = 3", 4], {"dim": 3}])
def test_shape_variants_that_are_no_list_of_snippets_are_named(tmp_path: Path, variants) -> None:
    # a lone snippet was split into its characters, each a held-out "shape" ("d", "i", "m", " ", "=", ...);
    # a number was a TypeError out of the loader (`drkernel audit`: internal error, exit 70)
    path = tmp_path / "problems.jsonl"
    path.write_text(json.dumps({"name": "a", "reference_code": REF, "shape_variants": variants}) + "\n")
    with pytest.raises(ProblemError, match=r"problems.jsonl:1: 'shape_variants' must be a list of size"):
        load_jsonl(path)


@pytest.mark.parametrize("key", ["extra_info", "reward_model"])
def test_an_extra_info_or_reward_model_that_is_no_object_is_named(tmp_path: Path, key: str) -> None:
    # text there (extra_info kept as a JSON string) was an AttributeError out of the loader: `drkernel
    # audit`'s 'internal error', exit 70
    path = tmp_path / "problems.jsonl"
    record = {"name": "a", key: json.dumps({"uuid": "a"})}
    path.write_text(json.dumps(record if key == "reward_model" else {**record, "code": REF}) + "\n")
    with pytest.raises(ProblemError, match=f"problems.jsonl:1: '{key}' must be an object, got"):
        load_jsonl(path)
    assert problem_from_record({"name": "a", "code": REF, key: None}, "row 1").name == "a"
    assert problem_from_record({"name": "a", "code": REF, key: float("nan")}, "row 1").name == "a"


def test_a_level_that_is_no_decimal_number_is_no_level() -> None:
    # "²" passed str.isdigit() and int() raised ValueError out of the loader
    assert problem_from_record({"name": "a", "reference_code": REF, "level": "²"}, "row 1").level is None
    assert problem_from_record({"name": "a", "reference_code": REF, "level": "2"}, "row 1").level == 2


@pytest.mark.parametrize("level, expected", [(2, 2), (2.0, 2), ("3", 3), (2.5, None), (float("nan"), None),
                                             (True, None), (-1.0, None), ("x", None), (None, None)])
def test_a_level_written_as_a_whole_float_is_that_level(level: object, expected: int | None) -> None:
    """pandas writes a level column with a missing level in it as floats: 2.0 was dropped (no level), and
    `--levels 2` then left the problem out."""
    record = {"name": "a", "reference_code": REF, "level": level}
    assert problem_from_record(record, "row 1").level == expected


def test_rl_parquet_rows(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    path = tmp_path / "cuda_llm_rl.parquet"
    pq.write_table(pa.Table.from_pylist([_rl_row(i) for i in range(3)]), path)
    problems = load_rl_parquet(path)
    assert [p.name for p in problems] == ["uuid-0", "uuid-1", "uuid-2"]
    assert problems[1].metadata["data_source"] == "cuda_llm"
    assert len(load_rl_parquet(path, limit=2)) == 2 and len(load_suite(str(path))) == 3
    (tmp_path / "junk.parquet").write_text("not parquet")
    with pytest.raises(ProblemError, match="junk.parquet: not a readable parquet file"):
        load_rl_parquet(tmp_path / "junk.parquet")
    with pytest.raises(ProblemError, match="no such file"):
        load_rl_parquet(tmp_path / "absent.parquet")


def test_suite_spec_errors() -> None:
    with pytest.raises(ProblemError, match="no such file or folder"):
        load_suite("/definitely/not/here")
    assert {p.metadata["size"] for p in load_suite("builtin:gpu", levels=(2,))} == {"gpu"}


def test_a_file_that_is_not_utf8_is_named_and_skipped_in_a_folder(tmp_path: Path) -> None:
    (tmp_path / "good.py").write_text(REF)
    (tmp_path / "latin1.py").write_bytes(b"# caf\xe9\n" + REF.encode())
    assert [p.name for p in load_folder(tmp_path)] == ["good"]
    with pytest.raises(ProblemError, match="latin1.py: not UTF-8 text"):
        load_problem_file(tmp_path / "latin1.py")
    (tmp_path / "p.jsonl").write_bytes(b"\xff\xfe\n")
    with pytest.raises(ProblemError, match="p.jsonl: not UTF-8 text"):
        load_jsonl(tmp_path / "p.jsonl")



def test_a_file_that_starts_with_a_byte_order_mark_is_its_text(tmp_path: Path) -> None:
    """A reference saved 'UTF-8 with BOM' (Windows editors) runs under python3, but audit, bench and suite
    read it as 'syntax error at line 1: invalid non-printable character U+FEFF' (a folder skipped it, a
    .jsonl's first row was no JSON). The mark is not part of the text."""
    (tmp_path / "bom.py").write_bytes(b"\xef\xbb\xbf" + REF.encode())
    assert load_problem_file(tmp_path / "bom.py").reference_code == REF
    assert [p.name for p in load_folder(tmp_path)] == ["bom"]
    row = json.dumps({"name": "row", "reference_code": REF})
    (tmp_path / "p.jsonl").write_bytes(b"\xef\xbb\xbf" + row.encode())
    assert [p.reference_code for p in load_jsonl(tmp_path / "p.jsonl")] == [REF]

def test_a_folder_whose_name_starts_with_builtin_is_that_folder(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "builtin_copy").mkdir()
    (tmp_path / "builtin_copy" / "mine.py").write_text(REF)
    (tmp_path / "builtins.jsonl").write_text(json.dumps({"name": "row", "reference_code": REF}) + "\n")
    monkeypatch.chdir(tmp_path)
    assert [p.name for p in load_suite("builtin_copy")] == ["mine"]
    assert [p.name for p in load_suite("builtins.jsonl")] == ["row"]
    assert len(load_suite("builtin")) == len(load_suite("builtin:cpu")) > 1


def test_levels_a_checkout_lacks_are_named_not_dropped(tmp_path: Path) -> None:
    for level in (1, 2):
        (tmp_path / f"level{level}").mkdir()
        (tmp_path / f"level{level}" / "1_Op.py").write_text(REF)
    with pytest.raises(ProblemError, match=r"no folder for level\(s\) 3"):
        load_suite(str(tmp_path), levels=(3,))
    with pytest.raises(ProblemError, match=r"no folder for level\(s\) 3"):
        load_suite(str(tmp_path), levels=(2, 3))
    assert [p.name for p in load_suite(str(tmp_path), levels=(2,))] == ["L2/1_Op"]
    assert [p.name for p in load_suite(str(tmp_path))] == ["L1/1_Op", "L2/1_Op"]


def test_a_name_two_rows_share_is_refused_naming_both(tmp_path: Path) -> None:
    """Results are kept by problem name (a survey's rows, a bench's finished samples): the second
    problem of a name would overwrite the first's, or be taken as already done."""
    path = tmp_path / "problems.jsonl"
    rows = [{"name": "relu", "reference_code": REF}, {"name": "other", "reference_code": REF},
            {"name": "relu", "reference_code": REF.replace("relu", "relu6")}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(ProblemError, match=r"problems.jsonl:3: problem name 'relu' repeats line 1"):
        load_suite(str(path))
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    pq.write_table(pa.Table.from_pylist([_rl_row(1), _rl_row(2), _rl_row(1)]), tmp_path / "rl.parquet")
    with pytest.raises(ProblemError, match=r"rl.parquet\[row 2\]: problem name 'uuid-1' repeats row 0"):
        load_suite(str(tmp_path / "rl.parquet"))


def test_levels_leave_out_the_problems_with_no_level(tmp_path: Path,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    """A problem with no level was kept by every levels filter: `--levels 2` ran a row without a level
    too, and a suite with no levels at all ran whole as if no level had been asked for."""
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps({"name": name, "reference_code": REF, **extra}) + "\n"
                            for name, extra in (("a", {"level": 1}), ("b", {"level": 2}), ("c", {}))))
    assert [p.name for p in load_suite(str(rows), levels=(2,))] == ["b"]
    assert "levels 2 leave out its 1 problem with no level" in caplog.text
    assert [p.name for p in load_suite(str(rows))] == ["a", "b", "c"]  # no levels asked: all
    (tmp_path / "folder").mkdir()
    (tmp_path / "folder" / "1_Op.py").write_text(REF)
    with pytest.raises(ProblemError, match=r"levels 1,2 asked for, but its one problem has no level"):
        load_suite(str(tmp_path / "folder"), levels=(1, 2))
    (tmp_path / "folder" / "2_Op.py").write_text(REF)
    with pytest.raises(ProblemError, match=r"levels 1 asked for, but none of its 2 problems has a level"):
        load_suite(str(tmp_path / "folder"), levels=(1,))


@pytest.mark.parametrize("spec", ["", " "])
def test_an_empty_suite_is_named_not_the_current_folder(tmp_path: Path, monkeypatch, spec: str) -> None:
    """Path("") is the current folder: `drkernel audit "$SUITE"` (or baselines, bench) with SUITE unset ran
    every reference of the folder it was started in. An empty spec is a ProblemError saying so."""
    (tmp_path / "here.py").write_text(REF)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ProblemError, match="empty; name one"):
        load_suite(spec)
    assert [p.name for p in load_suite(".")] == ["here"]
