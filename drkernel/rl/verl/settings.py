"""The `drkernel:` block of a verl config -> drkernel's RunConfig, and the judge each worker process shares.

In a verl run: `+drkernel.recipe=dr_kernel_8b` (any drkernel recipe name) and
`+drkernel.overrides='[judge.executor=http,judge.base_url=http://judge:8000]'` (drkernel's own
key=value overrides). The RL settings (MRS, PRS, group filter, TRLOO, loss) come from this
RunConfig, the same one the own trainer reads, so both engines run one recipe.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from drkernel.errors import ConfigError
from drkernel.executors.base import Executor
from drkernel.executors.build import ClientExecutorConfig
from drkernel.recipes import get_recipe
from drkernel.rl.config import RunConfig, apply_overrides

__all__ = ["run_config", "shared_executor"]

_lock = threading.Lock()
_executors: dict[ClientExecutorConfig, Executor] = {}


def run_config(verl_config: Any) -> RunConfig:
    """drkernel's RunConfig from a verl config's `drkernel` block (recipe + overrides)."""
    block = verl_config.get("drkernel", None) if isinstance(verl_config, Mapping) else None
    if block is None:
        raise ConfigError(
            "verl config: no `drkernel` block; "
            "add +drkernel.recipe=dr_kernel_8b (and +drkernel.overrides=[...])"
        )
    recipe = block.get("recipe", None)
    if not recipe:
        raise ConfigError(
            "verl config: drkernel.recipe is required (e.g. dr_kernel_8b, dr_kernel_14b, debug_cpu)"
        )
    overrides = block.get("overrides", None) or []
    if isinstance(overrides, str):
        overrides = [overrides]
    return apply_overrides(get_recipe(str(recipe)), [str(o) for o in overrides])


def shared_executor(cfg: RunConfig) -> Executor:
    """One judge client per judge config per process: agent loops are built per episode."""
    from drkernel.executors.build import build_executor

    with _lock:
        if cfg.judge not in _executors:
            _executors[cfg.judge] = build_executor(cfg.judge)
        return _executors[cfg.judge]
