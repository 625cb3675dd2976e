"""Command-line options shared by `drkernel bench` and `drkernel optimize`, and what they build.

Adds the policy, sampling, executor, evaluation and context flags to a parser and turns parsed
arguments into a Policy, an Executor (local judge pool, http server, fake) and a LoopConfig.
The API key comes from the environment variable the user names (the process edge).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from typing import TYPE_CHECKING

# the `agent` extra, imported here so that `drkernel` can name what is missing for bench/optimize
import httpx  # noqa: F401
import matplotlib  # noqa: F401
import rich  # noqa: F401

from drkernel.agent.env import EnvConfig
from drkernel.agent.feedback import FeedbackConfig
from drkernel.agent.loop import LoopConfig
from drkernel.agent.policy import Policy, SamplingParams
from drkernel.agent.prompts import PromptConfig, load_prompt_template
from drkernel.agent.tts import ContextConfig
from drkernel.errors import ConfigError, ExecutorError
from drkernel.executors.build import CLIENT_EXECUTORS, build_executor, client_executor_config
from drkernel.executors.http import HttpExecutor
from drkernel.sandbox.requestcheck import validate_request
from drkernel.types import REWARD_PRESET_NAMES, EvalOptions, EvalRequest

if TYPE_CHECKING:
    from drkernel.executors.base import Executor

__all__ = [
    "add_run_options",
    "build_loop_config",
    "build_policy",
    "close_policy",
    "max_model_len",
    "prompt_budget",
    "reward_preset",
    "start_policy_and_executor",
    "tts_defaults",
]

TTS_TURNS = 14  # docs/paper_spec.md §10: 5 turns, then 9 iterations of +1 turn
TTS_BUDGET = 20480  # docs/paper_spec.md §11: the authors' eval max prompt length
PAPER_PERF_TRIALS = 10  # docs/paper_spec.md §3.2: timed calls in the released eval scripts


MAX_TOKENS = 8192  # --max-tokens' default: the authors' eval answer length (docs/paper_spec.md §11)

def add_run_options(p: argparse.ArgumentParser, default_turns: int) -> None:
    g = p.add_argument_group("model")
    g.add_argument("--model", required=True, help="model name (openai) or local path (hf)")
    g.add_argument("--base-url", default="http://127.0.0.1:8000/v1", help="OpenAI-compatible API")
    g.add_argument("--backend", choices=("openai", "hf"), default="openai",
                   help="openai: an OpenAI-compatible API; hf: a local model through transformers")
    g.add_argument("--api-key-env", default="OPENAI_API_KEY", help="env var holding the API key")
    g.add_argument("--tokenizer", help="local tokenizer path for exact prompt token counts")
    g.add_argument("--temperature", type=float, default=1.0, help="sampling temperature")
    g.add_argument("--top-p", type=float, default=0.95, help="nucleus sampling mass")
    g.add_argument("--max-tokens", type=int, default=MAX_TOKENS, help="generated tokens per turn")
    g.add_argument("--request-timeout", type=float, default=600.0, help="seconds per request")
    g = p.add_argument_group("episode")
    g.add_argument("--turns", type=int, default=None,
                   help=f"turns per episode ({default_turns}; 14 with --tts)")
    g.add_argument("--protocol", choices=("ours", "paper"), default="ours",
                   help="ours (default): compact feedback, median timing, over-budget prompts shrunk; "
                        "paper: the paper's Table 1 setting (the authors' JSON feedback, eval reward "
                        "0.5*C + 0.5*min(s,3), atol=rtol=1e-2, mean timing, answers cut to the room "
                        "left in --max-model-len, and a prompt that leaves none ends the episode with "
                        "an empty 'prompt overlong' turn; its config.json lists what still differs "
                        "from the authors' evaluation under paper_differences; docs/agent.md)")
    g.add_argument("--tts", action="store_true",
                   help=f"sequential test-time scaling: {TTS_TURNS} turns, each prompt keeps the top 4 "
                        f"earlier turns ranked by --rank-by (reward: the --reward-preset reward; with "
                        f"--protocol paper the best run of 4 consecutive turns, as the authors' code), "
                        f"{TTS_BUDGET}-token prompt budget")
    g.add_argument("--context", choices=("full", "top_w", "best_window"), default=None,
                   help="earlier turns in each prompt: all, the top --window, or the best window of --window")
    g.add_argument("--window", type=int, default=4, help="turns kept in context (top_w/best_window)")
    g.add_argument("--rank-by", choices=("reward", "speedup"), default="reward",
                   help="how top_w/best_window rank turns: the turn reward, or the speedup of correct turns")
    g.add_argument("--prompt-budget", type=int, default=None,
                   help=f"max prompt tokens (default: none; {TTS_BUDGET} with --tts or --protocol paper)")
    g.add_argument("--max-model-len", type=int, default=None, metavar="TOKENS",
                   help="the model's context in tokens, prompt + answer: each answer gets at most what "
                        "the prompt leaves of it (default: unbounded; with --protocol paper "
                        "--prompt-budget + --max-tokens, the authors' 20,480 + 8,192)")
    g.add_argument("--prompt-template", metavar="PATH",
                   help="the later-turn prompt: a text file holding the template, or a prompt config in the "
                        "authors' layout (.yaml: its per_turn_prompts entry named tool_response); "
                        "{feedback} marks where the judge's feedback goes, {entry_point} the class name, "
                        "{{ and }} are literal braces (default: drkernel's own words; with --protocol paper, "
                        "after the authors')")
    g.add_argument("--feedback-chars", type=int, default=3000,
                   help="the judge's feedback to the model cut to this many characters (at least 200)")
    g.add_argument("--concurrency", type=int, default=8, help="episodes in flight")
    g = p.add_argument_group("judge")
    g.add_argument("--executor", choices=CLIENT_EXECUTORS, default="local",
                   help="local: judges in this process's pool; http: a drkernel serve (--server); "
                        "fake: a scripted judge, for trying the loop")
    g.add_argument("--server", help="drkernel server URL for --executor http")
    g.add_argument("--server-token-env", default=None,
                   help="name of the environment variable holding the server's bearer token")
    g.add_argument("--device", help="cpu | cuda | cuda:N (default: cuda when present)")
    g.add_argument("--workers", type=int,
                   help="judges: on the CPU default cores // 2; with --device cuda[:N], judges sharing that "
                        "GPU (default 1)")
    g.add_argument("--reference-backend", choices=("eager", "compile"), default="eager",
                   help="the speedup's baseline: the reference as written, or through torch.compile")
    g.add_argument("--perf-trials", type=int, help="timed calls per runtime measurement")
    g.add_argument("--eval-timeout", type=float, default=180.0, help="seconds per evaluation")
    g.add_argument("--reward-preset", choices=REWARD_PRESET_NAMES, default=None,
                   help="turn reward: paper = C(1 + min(s,3) + PR) (default), "
                        "released = its 0.5-scaled variant, "
                        "eval = 0.5*C + 0.5*min(s,3) (default with --protocol paper), "
                        "correctness_speedup = C(1 + min(s,3))")
    g.add_argument("--paper-tolerance", action="store_true", help="atol=rtol=1e-2 for every dtype")


def tts_defaults(args: argparse.Namespace, default_turns: int) -> tuple[int, ContextConfig]:
    """Turn budget and context config from --turns/--tts/--context/--window/--prompt-budget."""
    turns = args.turns if args.turns is not None else (TTS_TURNS if args.tts else default_turns)
    paper = _protocol(args) == "paper"
    # STTS: the paper's text says the top 4 turns; its Table 1 rows come from the authors' code, the best
    # contiguous 4-turn window, ties to the earliest (docs/paper_spec.md §10): that, with --protocol paper
    mode = args.context or (("best_window" if paper else "top_w") if args.tts else "full")
    if turns < 1:
        raise ConfigError("--turns: must be >= 1")
    return turns, ContextConfig(mode=mode, w=args.window, token_budget=prompt_budget(args),
                                rank_by=getattr(args, "rank_by", "reward"),
                                overflow="overlong" if paper else "shrink",
                                ties="earliest" if paper else "latest",
                                max_model_len=max_model_len(args))


def _protocol(args: argparse.Namespace) -> str:
    return getattr(args, "protocol", None) or "ours"


def prompt_budget(args: argparse.Namespace) -> int | None:
    """--prompt-budget, else the authors' eval max prompt length with --tts or --protocol paper."""
    if args.prompt_budget is not None:
        return int(args.prompt_budget)
    return TTS_BUDGET if args.tts or _protocol(args) == "paper" else None


def max_model_len(args: argparse.Namespace) -> int | None:
    """--max-model-len, else with --protocol paper the prompt budget + --max-tokens: the authors' eval
    engine's max_model_len, 20,480 + 8,192 (docs/paper_spec.md §2.7, §11)."""
    given = getattr(args, "max_model_len", None)
    if given is not None:
        return int(given)
    budget = prompt_budget(args)
    if _protocol(args) != "paper" or budget is None:
        return None
    return budget + int(getattr(args, "max_tokens", None) or MAX_TOKENS)


def reward_preset(args: argparse.Namespace) -> str:
    """--reward-preset, else "eval" with --protocol paper and "paper" with ours."""
    return getattr(args, "reward_preset", None) or ("eval" if _protocol(args) == "paper" else "paper")


# a config's key -> the flag a user of bench/optimize sets it with: errors name the flag
_FLAGS = {"loop.concurrency": "--concurrency", "context.w": "--window", "context.mode": "--context",
          "context.token_budget": "--prompt-budget", "context.rank_by": "--rank-by",
          "context.max_model_len": "--max-model-len", "sampling.max_tokens": "--max-tokens",
          "sampling.temperature": "--temperature", "sampling.top_p": "--top-p",
          "feedback.max_chars": "--feedback-chars", "timeout_s": "--eval-timeout",
          "num_perf_trials": "--perf-trials"}


def build_loop_config(args: argparse.Namespace, default_turns: int) -> LoopConfig:
    try:
        return _build_loop_config(args, default_turns)
    except ConfigError as exc:
        message = str(exc)
        for key, flag in _FLAGS.items():
            if message.startswith(key + ":"):
                raise ConfigError(flag + message[len(key):]) from None
        raise


def _build_loop_config(args: argparse.Namespace, default_turns: int) -> LoopConfig:
    turns, context = tts_defaults(args, default_turns)
    paper = _protocol(args) == "paper"
    timeout = args.request_timeout
    if not (math.isfinite(timeout) and timeout > 0):
        raise ConfigError(f"--request-timeout {timeout:g}: must be a number of seconds > 0")
    template = getattr(args, "prompt_template", None)
    if template:
        load_prompt_template(template)  # a bad file is one line now, before any model or judge starts
    make = EvalOptions.paper if args.paper_tolerance or paper else EvalOptions
    options = make(
        reference_backend=args.reference_backend,
        # the authors' eval scripts time 10 calls (docs/paper_spec.md §3.2)
        num_perf_trials=(args.perf_trials if args.perf_trials is not None  # 0 is refused, not a default
                         else PAPER_PERF_TRIALS if paper else None),
        timeout_s=args.eval_timeout,
        reward_preset=reward_preset(args),
        paper_timing=paper,  # the authors' timing beside the judge's own (sandbox/stages/paper.py)
    )
    # the judge's own checks of the options (a bad --eval-timeout or --perf-trials), now: a judge
    # would refuse every evaluation of the run, after the model's answers were spent on them
    validate_request(EvalRequest(reference_code="", kernel_code="", options=options))
    env = EnvConfig(
        max_turns=turns,
        eval_options=options,
        feedback=FeedbackConfig(max_chars=args.feedback_chars, style="paper" if paper else "text"),
        prompts=PromptConfig(protocol=_protocol(args), template_file=template,
                             first_turn_from_data=paper),
        context=context,
        held_out=getattr(args, "held_out", False),
        speedup_from="mean" if paper else "median",
    )
    sampling = SamplingParams(
        temperature=args.temperature, top_p=args.top_p, max_tokens=args.max_tokens
    )
    return LoopConfig(env=env, sampling=sampling, concurrency=args.concurrency, model=args.model)


def start_policy_and_executor(args: argparse.Namespace) -> tuple[Policy, Executor]:
    """The policy, its endpoint checked (a model server that is down, refuses the key, does not serve
    the model or is not one: one line now, not retries and an all-zero table), then the executor."""
    _check_judge_flags(args)
    policy = build_policy(args)
    try:
        check = getattr(policy, "check_endpoint", None)
        if callable(check):
            check()
        executor = build_executor(client_executor_config(
            args.executor, server=args.server, device=args.device, workers=args.workers,
            token=server_token(args)))
        if isinstance(executor, HttpExecutor):
            _check_server(executor, args.server)
    except BaseException:
        close_policy(policy)
        raise
    return policy, executor


def _check_judge_flags(args: argparse.Namespace) -> None:
    """A judge flag the chosen --executor would ignore: `--server URL` without `--executor http` judged on
    this machine's local pool (the CPU interpreter where it has no GPU), and --workers with the http or
    fake executor set nothing, both without a word."""
    if args.executor != "http":
        for flag, dest in (("--server", "server"), ("--server-token-env", "server_token_env")):
            if getattr(args, dest, None):
                raise ConfigError(f"{flag}: --executor http's; add --executor http (the {args.executor} "
                                  "executor would ignore it)")
    elif args.workers is not None:
        raise ConfigError("--workers: the local executor's; with --executor http the server's workers judge "
                          "(drkernel serve --workers)")
    if args.executor == "fake" and args.workers is not None:
        raise ConfigError("--workers: the local executor's; the fake executor runs no judge")


def _check_server(executor: HttpExecutor, url: str) -> None:
    """--server answers as a drkernel server and takes the token, asked once; else one line (the executor
    closed)."""
    try:
        executor.check_server()
    except ExecutorError as exc:
        executor.close()
        raise ConfigError(f"--server {url}: no drkernel server answers there ({exc})") from None
    except ConfigError as exc:  # HTTP 401/403: no token sent, or not the server's
        executor.close()
        raise ConfigError(f"--server {url}: {exc}; --server-token-env names the variable that holds "
                          "the server's DRKERNEL_AUTH_TOKEN") from None


def close_policy(policy: Policy) -> None:
    close = getattr(policy, "close", None)
    if callable(close):
        close()


def build_policy(args: argparse.Namespace) -> Policy:
    if args.backend == "hf":
        if args.tokenizer:  # it was ignored: the local model's own tokenizer counts and generates
            raise ConfigError("--tokenizer is for --backend openai (a served model); --backend hf uses "
                              "the tokenizer of --model's folder")
        from drkernel.agent.hf_policy import HFPolicy

        return HFPolicy.Config(model_path=args.model, device=args.device or "cpu").build()
    from drkernel.agent.openai_policy import OpenAIPolicy

    if not args.tokenizer and prompt_budget(args) is not None:
        print(f"warning: the prompt budget ({prompt_budget(args)} tokens) is counted as characters / 4 "
              "without --tokenizer, which undercounts code: pass the served model's tokenizer "
              "(a local path or hub name) for exact counts", file=sys.stderr)
    policy = OpenAIPolicy.Config(
        base_url=args.base_url,
        model=args.model,
        api_key=os.environ.get(args.api_key_env) or None,
        timeout_s=args.request_timeout,
        max_concurrency=max(args.concurrency, 1),
        tokenizer=args.tokenizer,
    ).build()
    if args.tokenizer:
        try:  # loaded now: a path with no tokenizer is one line here, not a traceback at the first prompt
            policy.count_tokens("")
        except BaseException:
            policy.close()
            raise
    return policy


def server_token(args: argparse.Namespace) -> str | None:
    """The bearer token for --executor http, read from the variable --server-token-env names."""
    name = getattr(args, "server_token_env", None)
    if not name:
        return None
    token = os.environ.get(name)
    if not token:
        raise ConfigError(f"--server-token-env {name}: that environment variable is not set")
    return token
