"""`drkernel train rl | sft | recipes`: run a recipe (with --set overrides) into a run folder.

`train rl --recipe debug_cpu --run-dir DIR [--set key=value ...]` trains and resumes from DIR's last
checkpoint when rerun; `train sft --recipe R --data TRAJ.jsonl [--model PATH] --out DIR` is the cold
start; `train recipes [NAME]` lists the recipes or prints one resolved config as JSON; `train parquet
SUITE --out FILE` writes verl's RL parquet (recipes/verl) from any suite.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

# the `train` extra, imported here so that `drkernel` can name what is missing
import transformers

from drkernel.cli import INTERRUPTED, make_folder, rerun_command
from drkernel.errors import ConfigError
from drkernel.helpfmt import DefaultsHelpFormatter
from drkernel.problems.loaders import parse_levels
from drkernel.recipes import RECIPES, get_recipe
from drkernel.rl.config import (
    RunConfig,
    apply_overrides,
    config_keys,
    load_config,
    to_dict,
)
from drkernel.rl.config_layout import JUDGE_TRANSPORT_KEYS
from drkernel.rl.runlog import require_wandb
from drkernel.wording import counted

__all__ = ["RESUMABLE", "register", "resolve_config", "run"]

# The settings a resumed run may change, each with why: none changes what a step learns from its batch.
# Every other key must match RUN_DIR/config.json (--force-config overrides); a key ending in "." is a
# whole section. judge.token is never compared: config.json saves it as null. Left out on purpose:
# judge.devices, judge.num_cpu_workers and judge.judges_per_gpu (judges that share cores or a GPU, or
# other devices, move the timings the speedup reward reads), eval.* (the verdicts), and the judge's
# deadlines (judge.deadline_factor, deadline_grace_s, acquire_timeout_s, heartbeat_timeout_s,
# batch_timeout_s: they decide when a slow evaluation is the judge's fault, which ends its episode and
# leaves it out of the batch).
RESUMABLE = (
    # how far the run goes: a larger one goes on from the last checkpoint (with a constant learning rate
    # and no warm-up only: a cosine schedule or a warm-up is drawn over trainer.steps, _check_resume)
    "trainer.steps",
    "trainer.save_every",  # how often a checkpoint is written
    "trainer.keep_checkpoints",  # how many stay on disk
    "trainer.validate_every",  # validation measures the model, it never trains it
    # the micro-batches' losses add up to the batch's (rl/update.py backward_rows, each scaled by the
    # whole batch's rows and tokens): memory and speed, the same gradient up to rounding
    "trainer.micro_batch_tokens",
    # how many sequences the model backend generates together (rl/rollout.py ModelSampler): each is
    # sampled from the same policy, left-padded and masked, its log-probs the same up to rounding; only
    # the random draws of the steps after the resume differ from an uninterrupted run's
    "rollout.generation_batch",
    "log.",  # where the metrics go: TensorBoard, rollout files, W&B
    "rollout.base_url",  # the server of the current weights moved to another address (openai backend)
    # the judge's address, its transport's patience and its start's: they change no verdict, and
    # eval_cache.jsonl keeps its verdicts without them (config_layout.py says each)
    *JUDGE_TRANSPORT_KEYS,
)


def _resumable(key: str) -> bool:
    return any(key == k or (k.endswith(".") and key.startswith(k)) for k in RESUMABLE)


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("train", help="SFT and multi-turn RL (the Dr. Kernel recipe)")
    sub = p.add_subparsers(dest="train_command", metavar="{rl,sft,recipes,parquet}")
    rl = sub.add_parser("rl", help="multi-turn RL on one node (resumes from --run-dir)",
                        formatter_class=DefaultsHelpFormatter)
    _common(rl, recipe_default="debug_cpu")
    rl.add_argument("--run-dir",
                    help="checkpoints, metrics.jsonl, tensorboard/, rollouts/ (required to train)")
    rl.add_argument("--force-config", action="store_true", help="resume even if the config changed")
    rl.set_defaults(func=run_rl)
    sft = sub.add_parser("sft", help="multi-turn SFT on chat trajectories (assistant tokens only)",
                         formatter_class=DefaultsHelpFormatter)
    _common(sft, recipe_default=None)
    sft.add_argument("--data", required=True, help="trajectories .jsonl or .parquet with `messages`")
    sft.add_argument("--model", help="model name or folder (overrides model.path; default: the recipe's)")
    sft.add_argument("--out", required=True, help="output folder: model/, metrics.jsonl, config.json")
    sft.add_argument("--overwrite", action="store_true", help="replace what an earlier run left in --out")
    sft.add_argument("--lora-rank", type=int, help="train LoRA adapters of this rank (needs peft)")
    sft.set_defaults(func=run_sft_command)
    rec = sub.add_parser("recipes", help="list the recipes, or print one resolved config")
    rec.add_argument("name", nargs="?", help="a recipe to print, resolved, as JSON")
    rec.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a setting")
    rec.add_argument("--keys", action="store_true", help="list every settable key")
    rec.set_defaults(func=run_recipes)
    pq = sub.add_parser("parquet", help="write verl's RL parquet (recipes/verl) from a problem suite",
                        formatter_class=DefaultsHelpFormatter)
    pq.add_argument("suite", help="builtin[:cpu|:gpu], a KernelBench checkout, a folder, a .py, .jsonl "
                                  "or .parquet file (the authors' RL data)")
    pq.add_argument("--out", required=True, help="the .parquet file to write")
    pq.add_argument("--levels", type=parse_levels,
                    help="KernelBench levels to keep, e.g. 1,2 or 1-3 (a problem with no level is left out)")
    pq.add_argument("--problems", action="append", default=[], metavar="NAME",
                    help="keep only these problems (repeat the flag)")
    pq.add_argument("--limit", type=int, help="at most this many problems")
    pq.add_argument("--overwrite", action="store_true", help="replace an existing --out file")
    pq.set_defaults(func=run_parquet)
    p.set_defaults(func=lambda args: _usage(p))


def _common(p: argparse.ArgumentParser, recipe_default: str | None) -> None:
    what = f" (default: {recipe_default})" if recipe_default else " (required: SFT has no toy default)"
    # default None, so that --recipe given beside --config is seen (resolve_config refuses the pair)
    p.add_argument("--recipe", help=f"one of {', '.join(RECIPES)}{what}")
    p.add_argument("--config", help="a config.json to start from instead of a recipe")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a setting")
    p.add_argument("--print-config", action="store_true", help="print the resolved config and exit")


def _usage(p: argparse.ArgumentParser) -> int:
    p.print_help(sys.stderr)
    return 2


def resolve_config(recipe: str | None, config: str | None, overrides: list[str]) -> RunConfig:
    if recipe and config:
        raise ConfigError("--recipe and --config: give one (a config.json is a whole config, recipe and all)")
    base = load_config(config) if config else get_recipe(recipe or "debug_cpu")
    return apply_overrides(base, overrides)


def _check_resume(cfg: RunConfig, run_dir: Path, force: bool) -> list[str]:
    """The RESUMABLE settings that differ from the checkpointed run's, as "key: old -> new"; a change of
    any other is a ConfigError. [] when there is nothing to resume, or with --force-config."""
    saved = run_dir / "config.json"
    if not saved.exists() or not (run_dir / "checkpoints").exists() or force:
        return []
    # read as load_config reads it: a config.json of an older layout compares in today's
    old, new = _flatten(to_dict(load_config(saved))), _flatten(to_dict(cfg))
    changed = [k for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)]
    diff = [k for k in changed if not _resumable(k)]
    if "trainer.steps" in changed and (cfg.optim.schedule != "constant" or cfg.optim.warmup_ratio > 0):
        # the learning rate of each step is read off trainer.steps then (Trainer._lr): a resume that
        # changed it changed what every later step learns, without a word
        steps = f"{_shown(old.get('trainer.steps'))} -> {_shown(new.get('trainer.steps'))}"
        raise ConfigError(
            f"{run_dir}: trainer.steps {steps} moves the learning rate of every step after the resume "
            f"(optim.schedule={cfg.optim.schedule}, optim.warmup_ratio={cfg.optim.warmup_ratio:g} follow "
            "trainer.steps): --force-config to resume so"
        )
    if diff:
        raise ConfigError(
            f"{run_dir} holds a run with another config ({', '.join(diff[:6])}): use a new --run-dir, "
            "or --force-config"
        )
    return [f"{k}: {_shown(old.get(k))} -> {_shown(new.get(k))}" for k in changed]


def _shown(value: Any) -> str:
    """A setting as `--set` writes it."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return ",".join(map(_shown, value))
    return str(value)


def _flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _line_buffered() -> None:
    """Each line reaches a redirected log file when printed, not when a buffer fills (or never: kill -9)."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(line_buffering=True)


def run_rl(args: argparse.Namespace) -> int:
    cfg = resolve_config(args.recipe, args.config, args.set)
    if args.print_config:
        print(json.dumps(to_dict(cfg), indent=2))
        return 0
    if not args.run_dir:
        raise ConfigError(
            "--run-dir is required to train (it holds checkpoints, metrics.jsonl, tensorboard/)"
        )
    run_dir = Path(args.run_dir)
    require_wandb(cfg.log.wandb)
    changed = _check_resume(cfg, run_dir, args.force_config)
    if changed:
        print(f"{run_dir}: resuming with {', '.join(changed)}", file=sys.stderr)
    make_folder(run_dir, "--run-dir")
    _line_buffered()
    _quiet_progress_bars()
    from drkernel.rl.progress import Progress
    from drkernel.rl.trainer import Trainer

    try:
        with Trainer(cfg, run_dir, progress=Progress()) as trainer:
            start = trainer.state.step
            if start:
                print(f"resuming {run_dir} after step {start}", file=sys.stderr)
            for m in trainer.fit_iter():
                print(f"step {m['step']}: reward {m['reward/mean']:.4f}  fast@1 {m['batch/fast@1']:.3f}  "
                      f"groups {m['filter/groups_kept']}/{m['filter/groups']}  loss {m['actor/loss']:.4g}")
    except KeyboardInterrupt:
        print(f"drkernel train rl: interrupted; {_checkpointed(run_dir)}; to resume from it: "
              f"{rerun_command(args)}", file=sys.stderr)
        return INTERRUPTED
    if start > cfg.trainer.steps:
        print(f"{run_dir} is already at step {start}, past trainer.steps={cfg.trainer.steps}: nothing to "
              "train (a larger trainer.steps goes on)")
    else:
        print(f"run finished at step {cfg.trainer.steps}: {run_dir}")
    return 0


def _checkpointed(run_dir: Path) -> str:
    """Where a rerun of an interrupted run starts from, in words."""
    from drkernel.rl.checkpoint import latest_checkpoint

    ckpt = latest_checkpoint(run_dir / "checkpoints")
    if ckpt is None:
        return f"no step was checkpointed in {run_dir} yet"
    try:
        step = int(json.loads((ckpt / "state.json").read_text())["step"])
    except (OSError, ValueError, KeyError, TypeError):
        return f"the last checkpoint is {ckpt}"
    return f"step {step} is checkpointed in {ckpt}"


def run_sft_command(args: argparse.Namespace) -> int:
    if not args.recipe and not args.config:
        raise ConfigError(
            "choose the settings: --recipe dr_kernel_8b "
            "(the paper's SFT: bfloat16, lr 2e-5, batch 64, 4 epochs; "
            "give --model) or --recipe debug_cpu (a toy: tiny random model, float32 on the CPU, lr 1e-3), "
            "or --config FILE"
        )
    overrides = list(args.set)
    if args.model:
        overrides += [f"model.path={args.model}", "model.tiny=null"]
    if args.lora_rank is not None:
        overrides.append(f"sft.lora_rank={args.lora_rank}")
    cfg = resolve_config(args.recipe, args.config, overrides)
    if args.print_config:
        print(json.dumps(to_dict(cfg), indent=2))
        return 0
    from drkernel.rl.build import build_model, training_problems
    from drkernel.rl.config import save_config
    from drkernel.rl.progress import Progress
    from drkernel.rl.sft import load_conversations, run_sft

    out = Path(args.out)
    earlier = [n for n in ("model", "metrics.jsonl", "config.json") if (out / n).exists()]
    if earlier and not args.overwrite:
        raise ConfigError(f"--out {out} already holds a run ({', '.join(earlier)}): choose a new folder, "
                          "or --overwrite to replace it")
    require_wandb(cfg.log.wandb)
    # the data before the folder: data that cannot be read left an empty --out behind
    conversations = load_conversations(args.data)
    make_folder(out, "--out")  # before the model loads: a folder that cannot be made is said at once
    _line_buffered()
    _quiet_progress_bars()
    if cfg.model.tiny is not None:
        print(f"note: recipe {cfg.name} trains a tiny random model with toy settings "
              f"({cfg.model.device}, {cfg.model.dtype}, lr {cfg.sft.lr:g})", file=sys.stderr)
    problems = training_problems(cfg.data) if cfg.model.tiny is not None else []
    model, tokenizer = build_model(cfg.model, problems, seed=cfg.sft.seed)
    save_config(cfg, out / "config.json")
    print(f"sft: {counted(len(conversations), 'conversation')}, {counted(cfg.sft.epochs, 'epoch')}, "
          f"batch {cfg.sft.batch_size}, lr {cfg.sft.lr:g}, {cfg.model.dtype} -> {out}", file=sys.stderr)
    summary = run_sft(cfg.sft, conversations, model, tokenizer, out, tensorboard=cfg.log.tensorboard,
                      wandb=cfg.log.wandb, run_config=to_dict(cfg), progress=Progress())
    print(json.dumps(summary, indent=2))
    return 0


def run_recipes(args: argparse.Namespace) -> int:
    if args.keys:
        _print_lines(config_keys())
        return 0
    if not args.name:
        for name, fn in RECIPES.items():
            doc = (fn.__doc__ or "").strip().splitlines()[0]
            print(f"{name:16s} {doc}")
        return 0
    print(json.dumps(to_dict(resolve_config(args.name, None, args.set)), indent=2))
    return 0


def run_parquet(args: argparse.Namespace) -> int:
    from drkernel.rl.build import load_problems
    from drkernel.rl.verl_data import write_parquet

    if args.limit is not None and args.limit < 1:
        raise ConfigError("--limit: must be at least 1")
    problems = load_problems(args.suite, args.problems, args.levels or (), args.limit)
    out = write_parquet(problems, args.out, overwrite=args.overwrite)
    print(f"wrote {counted(len(problems), 'problem')} to {out} (verl RL rows, agent drkernel_kernel)")
    return 0


def _print_lines(lines: list[str]) -> None:
    """Print to stdout; a reader that stops early (`| head`) ends it quietly."""
    try:
        sys.stdout.write("\n".join(lines) + "\n")
        sys.stdout.flush()
    except BrokenPipeError:
        # nothing more can be written: point stdout at /dev/null so the exit's flush does not fail too
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def run(args: argparse.Namespace) -> int:
    return int(args.func(args))


def _quiet_progress_bars() -> None:
    """Checkpoint saves would draw a progress bar per step on stderr."""
    transformers.utils.logging.disable_progress_bar()
