"""Problems: KernelBench-format references from the built-in suite, KernelBench checkouts, folders,
JSONL and the authors' RL parquet data, plus held-out shapes, audits and baseline timings.

Everything here produces or inspects `drkernel.types.Problem`; candidate code never runs here.
"""

from drkernel.problems.loaders import (
    load_folder,
    load_jsonl,
    load_kernelbench,
    load_problem_file,
    load_rl_parquet,
    load_suite,
    problem_from_record,
)
from drkernel.problems.suite import (
    builtin_names,
    builtin_problem,
    builtin_solution,
    load_builtin_suite,
    with_size,
)

__all__ = [
    "builtin_names",
    "builtin_problem",
    "builtin_solution",
    "load_builtin_suite",
    "load_folder",
    "load_jsonl",
    "load_kernelbench",
    "load_problem_file",
    "load_rl_parquet",
    "load_suite",
    "problem_from_record",
    "with_size",
]
