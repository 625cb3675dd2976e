"""Problem sources -> list[Problem]: KernelBench checkouts, folders of KernelBench-format files,
the authors' RL parquet rows, JSONL, and the built-in suite, behind one `load_suite(spec)`.

Every malformed input raises ProblemError naming the file (and row) and what is missing.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from drkernel.errors import ProblemError
from drkernel.problems.reference import validate_reference_source
from drkernel.problems.suite import load_builtin_suite
from drkernel.types import Problem
from drkernel.wording import counted

__all__ = [
    "KERNELBENCH_LEVELS",
    "LEVELS_SPAN",
    "load_folder",
    "load_jsonl",
    "load_kernelbench",
    "load_problem_file",
    "load_rl_parquet",
    "load_suite",
    "parse_levels",
    "problem_from_record",
    "prompt_messages",
]

log = logging.getLogger(__name__)

_LEVEL_DIR = re.compile(r"^level_?(\d+)$", re.I)
KERNELBENCH_LEVELS = (1, 2, 3, 4)  # the levels a --levels flag or data.levels may name
LEVELS_SPAN = f"{KERNELBENCH_LEVELS[0]} to {KERNELBENCH_LEVELS[-1]}"
LEVEL4_MESSAGE = (
    "KernelBench level 4 builds Hugging Face models with from_pretrained (gpt2, opt-1.3b, bart-large, ...), "
    "which needs model downloads; drkernel loads levels 1-3 only"
)


def _natural_key(path: Path) -> tuple[Any, ...]:
    return tuple(int(x) if x.isdigit() else x for x in re.split(r"(\d+)", path.name))


def _read_text(path: Path) -> str:
    """A file's UTF-8 text, less the byte-order mark an editor may put first (Python runs such a file)."""
    try:
        return path.read_text(encoding="utf-8-sig")
    except OSError as exc:
        raise ProblemError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise ProblemError(f"{path}: not UTF-8 text (byte {exc.start})") from None


def load_problem_file(path: str | Path, *, level: int | None = None, prefix: str = "") -> Problem:
    """One KernelBench-format .py file."""
    p = Path(path)
    code = _read_text(p)
    validate_reference_source(code, str(p))
    return Problem(name=prefix + p.stem, reference_code=code, level=level, metadata={"source": str(p)})


def load_folder(path: str | Path, *, level: int | None = None, prefix: str = "",
                strict: bool = False) -> list[Problem]:
    """Every KernelBench-format .py file of a folder (not recursive). Invalid files are skipped with
    a warning, or raise when `strict`."""
    root = Path(path)
    if not root.is_dir():
        raise ProblemError(f"{root}: not a folder")
    problems = []
    for f in sorted(root.glob("*.py"), key=_natural_key):
        if f.name.startswith("_"):
            continue
        try:
            problems.append(load_problem_file(f, level=level, prefix=prefix))
        except ProblemError as exc:
            if strict:
                raise
            log.warning("skipping %s", exc)
    return problems


def _level_dirs(root: Path) -> dict[int, Path]:
    for base in (root, root / "KernelBench"):
        if base.is_dir():
            found = {int(m.group(1)): d for d in base.iterdir()
                     if d.is_dir() and (m := _LEVEL_DIR.match(d.name))}
            if found:
                return found
    return {}


def load_kernelbench(path: str | Path, levels: Iterable[int] = (1, 2, 3)) -> list[Problem]:
    """Problems of a KernelBench checkout (the repo root, its KernelBench/ folder, or a folder with
    level1..level3). Names are "L{level}/{file stem}", as in KernelBench's own result files."""
    levels = tuple(levels)
    if 4 in levels:
        raise ProblemError(LEVEL4_MESSAGE)
    root = Path(path)
    dirs = _level_dirs(root)
    if not dirs:
        raise ProblemError(f"{root}: no level1..level3 folders found (is this a KernelBench checkout?)")
    missing = [lv for lv in levels if lv not in dirs]
    if missing:
        raise ProblemError(f"{root}: no folder for level(s) {', '.join(map(str, missing))}")
    problems = []
    for lv in levels:
        for p in load_folder(dirs[lv], level=lv, prefix=f"L{lv}/"):
            problems.append(Problem(p.name, p.reference_code, level=lv,
                                    metadata={**p.metadata, "suite": "kernelbench"}))
    return problems


_ROLES = ("system", "user", "assistant")


def prompt_messages(value: Any, origin: str) -> list[dict[str, str]]:
    """A row's own first-turn prompt as chat messages: the authors' parquet `prompt` (a list of
    {role, content} messages; pandas gives an array) or a plain string (one user message). It must end
    on a user message. Anything else is a ProblemError naming the row."""
    if isinstance(value, str):
        value = [{"role": "user", "content": value}]
    elif not isinstance(value, (dict, bytes)) and hasattr(value, "__iter__"):
        value = list(value)
    if not isinstance(value, list) or not value:
        raise ProblemError(f"{origin}: 'prompt' must be a string or a list of chat messages")
    out = []
    for m in value:
        if not (isinstance(m, dict) and m.get("role") in _ROLES and isinstance(m.get("content"), str)):
            raise ProblemError(f"{origin}: 'prompt' holds something other than a chat message "
                               "({'role': 'user' | 'system' | 'assistant', 'content': text})")
        out.append({"role": str(m["role"]), "content": str(m["content"])})
    if out[-1]["role"] != "user":
        raise ProblemError(f"{origin}: 'prompt' must end on a user message")
    return out


def _missing(value: Any) -> bool:
    """A row's field that is not there: None, or the NaN pandas gives a missing cell."""
    return value is None or (isinstance(value, float) and value != value)


def _shape_variants(value: Any, origin: str) -> tuple[str, ...]:
    """A row's held-out shapes: a list of size snippets (pandas gives an array); none where it has none.
    Anything else is a ProblemError naming the row: a lone snippet was split into its characters, each
    a "shape" of its own, and a number was a TypeError out of the loader."""
    if _missing(value):
        return ()
    if not isinstance(value, (str, bytes, dict)) and hasattr(value, "__iter__"):
        value = list(value)
    if not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
        raise ProblemError(f"{origin}: 'shape_variants' must be a list of size snippets "
                           f"(e.g. [\"batch_size = 3\"]), got {value!r:.80}")
    return tuple(value)


def _level(value: Any) -> int | None:
    """A row's KernelBench level: a whole number, written as an integer, as text ("2") or as a float (2.0,
    as pandas writes a column with a missing level in it); anything else is no level. A float level was
    dropped, and `--levels 2` left those problems out."""
    if isinstance(value, float) and value.is_integer() and value >= 0:
        return int(value)
    if isinstance(value, bool) or value is None:
        return None
    text = str(value)
    return int(text) if text.isdecimal() else None  # isdecimal: what int() reads ("²" is a digit, not one)


def _object(record: dict[str, Any], key: str, origin: str) -> dict[str, Any]:
    """A row's `reward_model` or `extra_info`: an object, or none (missing, null, pandas' NaN). Anything
    else is a ProblemError naming the row: text there (a JSON string, say) was an AttributeError out of
    the loader, and `drkernel audit` ended in 'internal error', exit 70."""
    value = record.get(key)
    if _missing(value):
        return {}
    if not isinstance(value, dict):
        raise ProblemError(f"{origin}: '{key}' must be an object, got {value!r:.80}")
    return value


def problem_from_record(record: dict[str, Any], origin: str) -> Problem:
    """A Problem from one JSONL object or RL parquet row.

    Accepts the authors' RL row (reward_model.ground_truth, extra_info.{entry_point, uuid, level},
    prompt) and a plain object ({"name", "reference_code" | "code", "level", "shape_variants", and
    optionally "prompt"}). A `prompt` is kept, as chat messages, in metadata["prompt"]: the first turn
    of `--protocol paper`."""
    reward_model, extra = _object(record, "reward_model", origin), _object(record, "extra_info", origin)
    code = record.get("reference_code") or record.get("code") or reward_model.get("ground_truth")
    if not isinstance(code, str) or not code.strip():
        raise ProblemError(f"{origin}: no reference code "
                           "(expected 'reference_code', 'code' or reward_model.ground_truth)")
    name = record.get("name") or record.get("problem_name") or extra.get("uuid") or extra.get("module_name")
    if not name:
        raise ProblemError(f"{origin}: no problem name (expected 'name' or extra_info.uuid)")
    entry_point = str(record.get("entry_point") or extra.get("entry_point") or "Model")
    validate_reference_source(code, origin, entry_point)
    level = record.get("level", extra.get("level"))
    metadata: dict[str, Any] = {k: record[k] for k in ("data_source",) if k in record}
    own = record.get("prompt")
    if own is not None and not (isinstance(own, float) and own != own):  # pandas: NaN for a missing one
        metadata["prompt"] = prompt_messages(own, origin)
    metadata.update({f"extra_{k}": v for k, v in extra.items() if k in ("ops", "module_name", "uuid")})
    return Problem(
        name=str(name),
        reference_code=code,
        entry_point=entry_point,
        level=_level(level),
        shape_variants=_shape_variants(record.get("shape_variants"), origin),
        metadata={**metadata, "source": origin},
    )


def load_jsonl(path: str | Path) -> list[Problem]:
    """One problem per line: a JSON object as accepted by problem_from_record."""
    p = Path(path)
    lines = _read_text(p).splitlines()
    problems: list[Problem] = []
    first: dict[str, int] = {}
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ProblemError(f"{p}:{i}: not JSON: {exc.msg}") from None
        if not isinstance(record, dict):
            raise ProblemError(f"{p}:{i}: expected a JSON object")
        problems.append(_unique(problem_from_record(record, f"{p}:{i}"), first, i, f"{p}:{i}", "line"))
    return problems


def _unique(problem: Problem, first: dict[str, int], where: int, origin: str, unit: str) -> Problem:
    """`problem`, unless an earlier row has its name: results are kept by name (a survey's rows, a
    bench's finished samples), so the second would overwrite the first's, or pass for done."""
    if problem.name in first:
        raise ProblemError(f"{origin}: problem name {problem.name!r} repeats {unit} {first[problem.name]}")
    first[problem.name] = where
    return problem


def _read_parquet_rows(path: Path) -> list[dict[str, Any]]:
    try:
        import pyarrow.parquet as pq
    except ModuleNotFoundError:
        pq = None
    if pq is not None:
        try:
            return pq.read_table(path).to_pylist()
        except (OSError, ValueError) as exc:
            raise ProblemError(f"{path}: not a readable parquet file: {exc}") from None
    try:
        import pandas as pd
    except ModuleNotFoundError:
        raise ProblemError(f"{path}: reading parquet needs pyarrow "
                           "(pip install 'drkernel[dev]' or pip install pyarrow)") from None
    try:
        return pd.read_parquet(path).to_dict("records")
    except (OSError, ValueError, ImportError) as exc:
        raise ProblemError(f"{path}: not a readable parquet file: {exc}") from None


def load_rl_parquet(path: str | Path, limit: int | None = None) -> list[Problem]:
    """The authors' RL data (e.g. cuda_llm_rl_thinking_1025.parquet): one problem per row."""
    p = Path(path)
    if not p.is_file():
        raise ProblemError(f"{p}: no such file")
    rows = _read_parquet_rows(p)
    if limit is not None:
        rows = rows[:limit]
    first: dict[str, int] = {}
    return [_unique(problem_from_record(dict(row), f"{p}[row {i}]"), first, i, f"{p}[row {i}]", "row")
            for i, row in enumerate(rows)]


def parse_levels(text: str) -> tuple[int, ...]:
    """"1,2" or "1-3" (or both: "1,3-4") -> (1, 2) or (1, 2, 3). An argparse `type`: a bad value is
    the flag's one-line usage error, never a traceback."""
    import argparse

    levels: list[int] = []
    try:
        for part in filter(None, (p.strip() for p in text.split(","))):
            lo, dash, hi = part.partition("-")
            first, last = int(lo), int(hi if dash else lo)
            if first not in KERNELBENCH_LEVELS or last not in KERNELBENCH_LEVELS or first > last:
                raise ValueError
            levels.extend(range(first, last + 1))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected KernelBench levels {LEVELS_SPAN}, e.g. 1,2 or 1-3") from None
    if not levels:
        raise argparse.ArgumentTypeError("no level given: expected e.g. 1,2 or 1-3")
    return tuple(dict.fromkeys(levels))


def load_suite(spec: str, levels: tuple[int, ...] | None = None) -> list[Problem]:
    """Problems of a suite spec: "builtin[:cpu|:gpu]", a KernelBench checkout, a folder, one .py,
    a .jsonl or a .parquet file. `levels` keeps only the problems of those levels (a problem with no
    level is of none)."""
    if not spec.strip():  # Path("") is the current folder: `drkernel audit "$SUITE"` with SUITE unset ran it
        raise ProblemError(f"suite {spec!r}: empty; name one (builtin, a folder, a KernelBench checkout, "
                           "a .py, .jsonl or .parquet file; . for the current folder)")
    builtin = spec == "builtin" or spec.startswith("builtin:")  # a folder "builtin_copy" is a folder
    if levels is not None and 4 in levels and not builtin:
        raise ProblemError(LEVEL4_MESSAGE)
    if builtin:
        problems = load_builtin_suite(size=spec.partition(":")[2] or "cpu")
    else:
        root = Path(spec)
        if not root.exists():
            raise ProblemError(f"suite {spec!r}: no such file or folder")
        if root.is_file() and root.suffix == ".jsonl":
            problems = load_jsonl(root)
        elif root.is_file() and root.suffix == ".parquet":
            problems = load_rl_parquet(root)
        elif root.is_file():
            problems = [load_problem_file(root)]
        elif dirs := _level_dirs(root):
            # the levels asked for, each of them (one the checkout lacks is named); else those it has, but 4
            wanted = sorted(levels) if levels else [lv for lv in sorted(dirs) if lv != 4]
            problems = load_kernelbench(root, wanted)
        else:
            problems = load_folder(root)
    if levels is not None:
        problems = _of_levels(spec, problems, levels)
    if not problems:
        raise ProblemError(f"suite {spec!r}: no problems found")
    return problems


def _of_levels(spec: str, problems: list[Problem], levels: tuple[int, ...]) -> list[Problem]:
    """The problems of `levels`. A problem with no level (a plain folder's, a row without one) is of
    none: it is left out, said in a warning; a suite none of whose problems has a level is an error."""
    kept = [p for p in problems if p.level in levels]
    unleveled = sum(p.level is None for p in problems)
    asked = ",".join(map(str, levels))
    if unleveled == len(problems) and problems:
        which = ("its one problem has no level" if len(problems) == 1
                 else f"none of its {len(problems)} problems has a level")
        raise ProblemError(f"suite {spec!r}: levels {asked} asked for, but {which} (a KernelBench checkout's "
                           "level folders, or a 'level' field of a row, give one): run it without levels")
    if unleveled:
        log.warning("suite %r: levels %s leave out its %s with no level", spec, asked,
                    counted(unleveled, "problem"))
    return kept
