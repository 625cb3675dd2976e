"""Problems -> verl's RL parquet (`drkernel train parquet SUITE --out FILE`), for recipes/verl/run_*.sh.

One row per problem, with the columns verl's RLHFDataset reads and the drkernel agent loop
(drkernel.rl.verl.agent_loop) needs:

- `prompt`: the episode's first prompt, rendered as the agent loop renders it (verl's dataset filters
  prompts longer than data.max_prompt_length by it; the agent loop renders its own from the problem);
- `agent_name`: "drkernel_kernel", the agent loop verl runs for the row;
- `data_source`: "drkernel" (verl groups validation metrics by it);
- `extra_info`: {"index": i, "problem": {"name", "reference_code", "entry_point", "level"}}.

This module imports no verl: the file can be written anywhere pyarrow is installed.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from drkernel.errors import ConfigError
from drkernel.files import write_file_atomically
from drkernel.types import Problem

__all__ = ["AGENT_NAME", "DATA_SOURCE", "parquet_rows", "write_parquet"]

AGENT_NAME = "drkernel_kernel"  # drkernel.rl.verl.agent_loop.AGENT_NAME (a test holds them equal)
DATA_SOURCE = "drkernel"


def _first_prompt(problem: Problem) -> list[dict[str, str]]:
    from drkernel.agent.env import KernelEnv
    from drkernel.executors.fake import FakeExecutor

    env = KernelEnv(problem, FakeExecutor())  # rendering the prompt runs nothing
    env.reset()
    return [{"role": str(m["role"]), "content": str(m["content"])} for m in env.observation]


def parquet_rows(problems: Sequence[Problem]) -> list[dict[str, Any]]:
    """verl RL dataset rows, one per problem, in order."""
    seen: set[str] = set()
    rows = []
    for i, p in enumerate(problems):
        if p.name in seen:
            raise ConfigError(f"problem name {p.name!r} appears twice: verl's rows need distinct problems")
        seen.add(p.name)
        rows.append({
            "data_source": DATA_SOURCE,
            "agent_name": AGENT_NAME,
            "prompt": _first_prompt(p),
            "extra_info": {
                "index": i,
                "problem": {"name": p.name, "reference_code": p.reference_code,
                            "entry_point": p.entry_point, "level": p.level},
            },
        })
    return rows


def write_parquet(problems: Sequence[Problem], out: str | Path, *, overwrite: bool = False) -> Path:
    """Write the rows to `out` (a .parquet file; its folder is created), whole or not at all."""
    path = Path(out)
    if path.suffix != ".parquet":
        raise ConfigError(f"--out {path}: must name a .parquet file")
    if path.is_dir():
        raise ConfigError(f"--out {path}: is a folder; name a .parquet file")
    if path.exists() and not overwrite:
        raise ConfigError(f"--out {path}: already exists (--overwrite replaces it)")
    if not problems:
        raise ConfigError("no problems to write")
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ModuleNotFoundError:
        raise ConfigError("writing parquet needs pyarrow: pip install pyarrow") from None
    table = pa.Table.from_pylist(parquet_rows(problems))
    try:  # replaced whole: a Ctrl-C or a full disk mid-write leaves the old file, not a torn one
        path.parent.mkdir(parents=True, exist_ok=True)
        write_file_atomically(path, lambda tmp: pq.write_table(table, tmp))
    except OSError as exc:
        raise ConfigError(f"--out {path}: cannot write: {exc.strerror or exc}") from None
    return path
