"""RunConfig sections -> the live components of a run: problems, model and tokenizer, executor, sampler.

Each builder reads one section and nothing else; the trainer and `drkernel train` call them, tests
pass their own objects instead (a FakeExecutor, a scripted sampler, a prebuilt tiny model).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from drkernel.agent.hf_policy import load_tokenizer, model_source, reword_load_errors
from drkernel.errors import ConfigError, ExecutorError
from drkernel.executors.base import Executor
from drkernel.executors.build import ClientExecutorConfig, build_executor
from drkernel.executors.http import HttpExecutor
from drkernel.rl.config import DataConfig, ModelConfig, RolloutConfig
from drkernel.rl.rollout import ModelSampler, PolicySampler, Sampler
from drkernel.types import Problem

__all__ = [
    "build_judge",
    "build_model",
    "build_sampler",
    "load_pretrained",
    "load_problems",
    "load_tokenizer",
    "model_source",
    "training_problems",
    "validation_problems",
]

log = logging.getLogger(__name__)


def load_problems(
    suite: str, names: Sequence[str] = (), levels: Sequence[int] = (), limit: int | None = None
) -> list[Problem]:
    """Problems of a suite spec (drkernel.problems.load_suite), filtered by name, level and count."""
    from drkernel.problems import load_suite

    problems = load_suite(suite, tuple(levels) or None)
    if names:
        by_name = {p.name: p for p in problems}
        missing = [n for n in names if n not in by_name]
        if missing:
            raise ConfigError(f"data.problems: not in suite {suite!r}: {', '.join(missing)}")
        problems = [by_name[n] for n in names]
    return problems[:limit] if limit else problems


PAPER_RL_DATA = "cuda_llm_rl_thinking_1025.parquet"


def training_problems(data: DataConfig) -> list[Problem]:
    if Path(data.suite).name == PAPER_RL_DATA and not Path(data.suite).exists():
        raise ConfigError(
            f"data.suite {data.suite!r}: no such file. It is the paper's RL training set (71,996 KernelBench-"
            "format problems), the file of the Hugging Face data set hkust-nlp/drkernel-rl-data: download it "
            f"and pass --set data.suite=PATH/{PAPER_RL_DATA} (docs/rl.md, 'Training data')"
        )
    return load_problems(data.suite, data.problems, data.levels, data.limit)


def validation_problems(data: DataConfig) -> list[Problem]:
    if not data.validation_suite:
        return []
    return load_problems(
        data.validation_suite, data.validation_problems, data.validation_levels, data.validation_limit
    )


def build_model(cfg: ModelConfig, problems: Sequence[Problem] = (), *, seed: int = 0) -> tuple[Any, Any]:
    """(model, tokenizer) on cfg.device in cfg.dtype: a tiny random model or a pretrained one."""
    import torch

    from drkernel.device import resolve_device  # the one resolver: None -> cuda:0 or cpu

    dtype = getattr(torch, cfg.dtype)
    if cfg.tiny is not None:
        from drkernel.rl.tiny import build_tiny, builtin_variants

        model, tokenizer = build_tiny(cfg.tiny, builtin_variants(problems, cfg.tiny.variants), seed=seed)
    else:
        model, tokenizer = load_pretrained(
            str(cfg.path), dtype=cfg.dtype, trust_remote_code=cfg.trust_remote_code
        )
    model = model.to(device=resolve_device(cfg.device), dtype=dtype)
    if cfg.gradient_checkpointing:
        model.gradient_checkpointing_enable()
        model.config.use_cache = False
    return model, tokenizer


def load_pretrained(
    path: str, *, dtype: str = "bfloat16", trust_remote_code: bool = False
) -> tuple[Any, Any]:
    import torch

    try:
        from transformers import AutoModelForCausalLM
    except ModuleNotFoundError as exc:
        raise ConfigError("training needs transformers (pip install 'drkernel[train]')") from exc
    source = model_source(path)
    tokenizer = load_tokenizer(path, trust_remote_code=trust_remote_code, what="model", source=source)
    with reword_load_errors("model", path):
        model = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype),
                                                     trust_remote_code=trust_remote_code,
                                                     local_files_only=source == "cache")
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model, tokenizer


def build_judge(cfg: ClientExecutorConfig) -> Executor:
    """The run's executor. A `drkernel serve` server (judge.executor=http) is asked once now: one that
    does not answer is one line, not a run whose every evaluation fails after the client's retries."""
    executor = build_executor(cfg)
    if isinstance(executor, HttpExecutor):
        try:
            executor.check_server()
        except ExecutorError as exc:
            executor.close()
            raise ConfigError(f"judge.base_url {executor.config.base_url}: no drkernel server answers there "
                              f"({exc}): start `drkernel serve`, or set judge.base_url at it") from None
    return executor


def build_sampler(cfg: RolloutConfig, model: Any, tokenizer: Any) -> Sampler:
    """The trainer's own model (batched generation) or an OpenAI-compatible server of its weights."""
    if cfg.backend == "model":
        return ModelSampler(
            model, tokenizer, max_prompt_tokens=cfg.max_prompt_tokens, batch_size=cfg.generation_batch
        )
    from drkernel.agent.openai_policy import OpenAIPolicy

    policy = OpenAIPolicy.Config(
        base_url=cfg.base_url, model=cfg.served_model or "policy", max_concurrency=cfg.concurrency
    ).build()
    try:  # a server that is down or serves another model: one line now, not a run of failed episodes
        policy.check_endpoint(url_key="rollout.base_url", model_key="rollout.served_model",
                              key_hint="train rl sends no API key: serve it without one")
    except BaseException:
        policy.close()
        raise
    log.warning(
        "rollouts come from %s: that server must serve the current weights (reload it from "
        "run_dir/checkpoints/latest after each step), or the samples are off-policy", cfg.base_url
    )
    return PolicySampler(
        policy, tokenizer, max_prompt_tokens=cfg.max_prompt_tokens, concurrency=cfg.concurrency
    )
