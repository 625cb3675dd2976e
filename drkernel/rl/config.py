"""RunConfig: every setting of an SFT or RL run, as frozen dataclasses owned by their component.

A recipe (drkernel.recipes) returns a RunConfig; `apply_overrides(cfg, ["rl.advantage=grpo"])`
type-checks and applies `--set key=value` edits; `to_dict`/`from_dict` round-trip run_dir/config.json.
The sections nest their owners' configs: `judge` is the executor's (picked by `judge.executor`), `reward`
the reward's (drkernel.reward.RewardConfig), `rl.advantage` the estimator's. Which keys moved or
retired, and how an older config.json is read, is drkernel.rl.config_layout.
"""

from __future__ import annotations

import dataclasses
import json
import math
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from drkernel.device import is_device_name
from drkernel.errors import ConfigError
from drkernel.executors.build import CLIENT_EXECUTORS, EXECUTORS, ClientExecutorConfig, executor_name
from drkernel.executors.local import LocalExecutor
from drkernel.files import write_text_atomically
from drkernel.problems.loaders import KERNELBENCH_LEVELS, LEVELS_SPAN
from drkernel.reward import RewardConfig, reward_options
from drkernel.rl.advantages import AdvantageConfig
from drkernel.rl.config_layout import (
    EVAL_REWARD_FIELDS,
    MOVED_KEYS,
    PRESETS,
    RETIRED_KEYS,
    SHORTHANDS,
    judge_dict,
    moved,
    preset,
    retired,
)
from drkernel.rl.filters import DynamicSamplingConfig
from drkernel.rl.losses import LossConfig
from drkernel.rl.rejection import MismatchConfig, ProfilingRejectionConfig
from drkernel.sandbox.requestcheck import validate_request
from drkernel.settings import JudgeSettings
from drkernel.types import EvalOptions, EvalRequest

__all__ = [
    "DataConfig",
    "LogConfig",
    "ModelConfig",
    "OptimConfig",
    "RLConfig",
    "RolloutConfig",
    "RunConfig",
    "SFTConfig",
    "TinyModelConfig",
    "TrainerConfig",
    "apply_overrides",
    "config_keys",
    "from_dict",
    "load_config",
    "save_config",
    "to_dict",
]


@dataclass(frozen=True, kw_only=True, slots=True)
class TinyModelConfig:
    """A randomly initialised Qwen2-style model with a word-level tokenizer built locally.

    Its vocabulary holds a few filler words and one token per (problem, kernel variant) that decodes
    to that variant's whole source ("macro" tokens), so a tiny model can submit real kernels.
    """

    hidden_size: int = 32
    layers: int = 2
    heads: int = 2
    max_positions: int = 8192
    filler_words: tuple[str, ...] = ("here", "is", "my", "kernel", "triton", "fast", "code", "ok")
    # variants per problem: "honest" (the built-in solution) and "passthrough" (the reference's own
    # torch code renamed ModelNew: a hack the judge must catch)
    variants: tuple[str, ...] = ("honest", "passthrough")

    def __post_init__(self) -> None:
        if self.heads < 1:
            raise ConfigError(f"model.tiny.heads: must be >= 1, got {self.heads}")
        if self.hidden_size < 8 or self.hidden_size % self.heads:
            raise ConfigError("model.tiny.hidden_size: must be >= 8 and divisible by heads")
        if self.layers < 1:
            raise ConfigError("model.tiny.layers: must be >= 1")


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelConfig:
    path: str | None = None  # a Hugging Face name or local folder
    tiny: TinyModelConfig | None = None  # when set, a tiny random model is built instead of `path`
    dtype: Literal["float32", "bfloat16", "float16"] = "bfloat16"
    device: str | None = None  # None: cuda:0 when present, else cpu (drkernel.device.resolve_device)
    gradient_checkpointing: bool = False
    trust_remote_code: bool = False

    def __post_init__(self) -> None:
        if self.path is None and self.tiny is None:
            raise ConfigError("model: set model.path (or model.tiny, which takes precedence)")
        if self.device is not None and not is_device_name(self.device):
            raise ConfigError(f"model.device: {self.device!r} is not cpu, cuda or cuda:N (none: cuda:0 "
                              "when present, else cpu)")


@dataclass(frozen=True, kw_only=True, slots=True)
class DataConfig:
    suite: str = "builtin:cpu"  # anything drkernel.problems.load_suite reads (folder, .jsonl, .parquet)
    problems: tuple[str, ...] = ()  # keep only these problem names (empty: all)
    # keep only these KernelBench levels (empty: all); a problem with no level is of none, left out
    levels: tuple[int, ...] = ()
    limit: int | None = None
    validation_suite: str | None = None  # docs/paper_spec.md §9.3: KernelBench level 2
    validation_problems: tuple[str, ...] = ()
    validation_levels: tuple[int, ...] = ()
    validation_limit: int | None = None

    def __post_init__(self) -> None:
        for name in ("limit", "validation_limit"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ConfigError(f"data.{name}: must be >= 1 (none: every problem), got {value}")
        for name in ("problems", "validation_problems"):
            names = getattr(self, name)
            if any(not isinstance(n, str) or not n.strip() for n in names):  # `--set data.problems=`
                raise ConfigError(f"data.{name}: an empty problem name in {list(names)} (empty list: all)")
            twice = sorted({n for n in names if names.count(n) > 1})
            if twice:  # each was trained on twice an epoch
                raise ConfigError(f"data.{name}: {', '.join(twice)} named more than once")
        for name in ("levels", "validation_levels"):
            bad = [v for v in getattr(self, name) if v not in KERNELBENCH_LEVELS]
            if bad:  # refused at load time, after the model had loaded
                raise ConfigError(f"data.{name}: {bad} (KernelBench's levels are {LEVELS_SPAN})")


@dataclass(frozen=True, kw_only=True, slots=True)
class RolloutConfig:
    backend: Literal["model", "openai"] = "model"  # the trainer's own model, or a served copy of it
    base_url: str = "http://127.0.0.1:8000/v1"  # openai backend: a server that serves the current weights
    served_model: str | None = None
    n: int = 16  # docs/paper_spec.md §9.3: rollouts per prompt
    max_turns: int = 3  # docs/paper_spec.md §9.3
    temperature: float = 1.0  # docs/paper_spec.md §9.3
    top_p: float = 1.0  # docs/paper_spec.md §9.3
    max_new_tokens: int = 8192  # docs/paper_spec.md §9.3: response length per turn
    max_prompt_tokens: int = 10240  # docs/paper_spec.md §9.3: longer prompts end the turn ("prompt overlong")
    generation_batch: int = 64  # sequences generated together by the model backend
    concurrency: int = 32  # docs/paper_spec.md §3.1: max concurrency 32 towards the judge
    feedback_chars: int = 3000
    cache_evaluations: bool = False  # reuse the verdict of an identical (reference, kernel) pair

    def __post_init__(self) -> None:
        for name in (
            "n", "max_turns", "max_new_tokens", "max_prompt_tokens", "generation_batch", "concurrency"
        ):
            if getattr(self, name) < 1:
                raise ConfigError(f"rollout.{name}: must be >= 1")
        if not 0 < self.top_p <= 1 or self.temperature < 0:
            raise ConfigError("rollout: need temperature >= 0 and top_p in (0, 1]")
        if not self.base_url.startswith(("http://", "https://")):
            raise ConfigError(f"rollout.base_url: {self.base_url!r} is not an http(s) URL")
        if self.feedback_chars < 200:  # the feedback's own floor, met only once the run had started
            raise ConfigError(f"rollout.feedback_chars: {self.feedback_chars} is below 200")


@dataclass(frozen=True, kw_only=True, slots=True)
class RLConfig:
    # the estimator and its settings (docs/paper_spec.md §5.1-§5.3), its owner's config as it is;
    # `--set rl.advantage=grpo` is short for `rl.advantage.estimator=grpo`
    advantage: AdvantageConfig = field(default_factory=AdvantageConfig)
    mask_void_turn: bool = True  # docs/paper_spec.md §5.4
    mrs: MismatchConfig = field(default_factory=MismatchConfig)
    prs: ProfilingRejectionConfig = field(default_factory=ProfilingRejectionConfig)
    dynamic_sampling: DynamicSamplingConfig = field(default_factory=DynamicSamplingConfig)
    # docs/paper_spec.md §8: roll out more prompts until `prompts_per_step` groups survive, at most this
    # many rounds per step (1: no refill)
    max_sampling_rounds: int = 1
    loss: LossConfig = field(default_factory=LossConfig)

    def __post_init__(self) -> None:
        if self.max_sampling_rounds < 1:
            raise ConfigError("rl.max_sampling_rounds: must be >= 1")


@dataclass(frozen=True, kw_only=True, slots=True)
class OptimConfig:
    lr: float = 1e-6  # docs/paper_spec.md §9.3
    weight_decay: float = 0.01  # docs/paper_spec.md §5.5
    betas: tuple[float, float] = (0.9, 0.999)
    grad_clip: float = 1.0  # docs/paper_spec.md §5.5
    warmup_ratio: float = 0.0  # docs/paper_spec.md §5.5: no warm-up in RL
    schedule: Literal["constant", "cosine"] = "constant"

    def __post_init__(self) -> None:
        if self.lr <= 0 or self.grad_clip <= 0:
            raise ConfigError("optim: lr and grad_clip must be > 0")
        if not 0 <= self.warmup_ratio < 1:
            raise ConfigError("optim.warmup_ratio: must be in [0, 1)")
        _check_adamw("optim", self.betas, self.weight_decay)


def _check_adamw(section: str, betas: tuple[float, float], weight_decay: float) -> None:
    """AdamW's own checks, made when the config is built rather than once the model has loaded."""
    if not all(0 <= b < 1 for b in betas):
        raise ConfigError(f"{section}.betas: must be two numbers in [0, 1), got {','.join(map(str, betas))}")
    if weight_decay < 0:
        raise ConfigError(f"{section}.weight_decay: must be >= 0, got {weight_decay}")


@dataclass(frozen=True, kw_only=True, slots=True)
class TrainerConfig:
    steps: int = 300  # docs/paper_spec.md §9.3: figures stop at step 300
    prompts_per_step: int = 16  # docs/paper_spec.md §9.3
    micro_batch_tokens: int = 32768  # tokens per forward/backward micro-batch (padding included)
    seed: int = 0
    save_every: int = 1  # checkpoint after every k-th step (1: a crash loses no completed step)
    keep_checkpoints: int = 2
    validate_every: int = 10  # docs/paper_spec.md §9.3 (0: never)
    validation_samples: int = 8  # docs/paper_spec.md §9.3
    validation_top_p: float = 0.95  # docs/paper_spec.md §9.3

    def __post_init__(self) -> None:
        for name in ("steps", "prompts_per_step", "micro_batch_tokens", "save_every", "keep_checkpoints"):
            if getattr(self, name) < 1:
                raise ConfigError(f"trainer.{name}: must be >= 1")
        if self.validate_every < 0:
            raise ConfigError("trainer.validate_every: must be >= 0")
        if self.validation_samples < 1:
            raise ConfigError(f"trainer.validation_samples: must be >= 1 (trainer.validate_every=0 turns "
                              f"validation off), got {self.validation_samples}")
        if not 0 < self.validation_top_p <= 1:
            raise ConfigError(f"trainer.validation_top_p: must be in (0, 1], got {self.validation_top_p}")


@dataclass(frozen=True, kw_only=True, slots=True)
class LogConfig:
    tensorboard: bool = True  # also write TensorBoard events (needs the tensorboard package)
    save_rollouts: bool = True  # run_dir/rollouts/step_XXXXXX.jsonl, one trajectory a line
    # Weights & Biases: "auto" when the wandb package is installed and set up (WANDB_API_KEY or
    # WANDB_MODE in the environment, or a `wandb login`); "on" always (a run without the wandb package
    # is refused before it starts); "off" never
    wandb: Literal["auto", "on", "off"] = "auto"
    wandb_project: str = "drkernel"


@dataclass(frozen=True, kw_only=True, slots=True)
class SFTConfig:
    """Cold-start SFT (docs/paper_spec.md §9.2; the script's values, the paper's are in the recipes'
    comments)."""

    lr: float = 2e-5
    batch_size: int = 64  # conversations per optimizer step
    micro_batch_size: int = 2
    epochs: int = 4
    max_length: int = 18432  # right truncation
    warmup_ratio: float = 0.1
    schedule: Literal["constant", "cosine"] = "cosine"
    betas: tuple[float, float] = (0.9, 0.95)
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    lora_rank: int = 0  # > 0: train LoRA adapters (needs peft)
    lora_alpha: int = 16
    seed: int = 0

    def __post_init__(self) -> None:
        if self.batch_size < 1 or self.micro_batch_size < 1 or self.epochs < 1 or self.max_length < 2:
            raise ConfigError("sft: batch_size, micro_batch_size, epochs >= 1 and max_length >= 2")
        if self.lr <= 0:
            raise ConfigError("sft.lr: must be > 0")
        if self.lora_rank < 0:
            raise ConfigError(f"sft.lora_rank: must be >= 0 (0: no LoRA), got {self.lora_rank}")
        if self.lora_alpha < 1:
            raise ConfigError(f"sft.lora_alpha: must be >= 1, got {self.lora_alpha}")
        if self.grad_clip <= 0:
            raise ConfigError(f"sft.grad_clip: must be > 0, got {self.grad_clip}")
        if not 0 <= self.warmup_ratio < 1:
            raise ConfigError(f"sft.warmup_ratio: must be in [0, 1), got {self.warmup_ratio}")
        _check_adamw("sft", self.betas, self.weight_decay)


@dataclass(frozen=True, kw_only=True, slots=True)
class RunConfig:
    name: str = "run"
    model: ModelConfig = field(default_factory=lambda: ModelConfig(path="Qwen/Qwen3-8B-Base"))
    data: DataConfig = field(default_factory=DataConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    # the executor the run judges through, its own config: `judge.executor` (local | http | fake) picks
    # it, the other `judge.*` keys are its fields (`judge.devices`, `judge.base_url`, ...). Its secret,
    # an http judge's `token`, is never written to config.json (see to_dict)
    judge: ClientExecutorConfig = field(default_factory=LocalExecutor.Config)
    # every request's options, but for the reward's fields (eval_options() fills them from `reward`)
    eval: EvalOptions = field(default_factory=EvalOptions)
    # the turn reward the run trains on (docs/paper_spec.md §4); `--set reward=released` sets a preset
    reward: RewardConfig = field(default_factory=RewardConfig)
    rl: RLConfig = field(default_factory=RLConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    log: LogConfig = field(default_factory=LogConfig)
    sft: SFTConfig = field(default_factory=SFTConfig)

    def __post_init__(self) -> None:
        if not isinstance(self.judge, ClientExecutorConfig):
            raise ConfigError(f"judge: {type(self.judge).__name__} is not the config of one of "
                              f"{' | '.join(CLIENT_EXECUTORS)}")
        for name in EVAL_REWARD_FIELDS:  # the reward has one place: `reward`
            if getattr(self.eval, name) != getattr(_PLAIN_OPTIONS, name):
                raise ConfigError(f"eval.{name}: {RETIRED_KEYS[f'eval.{name}']}")
        if self.eval.entry_point != _PLAIN_OPTIONS.entry_point:
            raise ConfigError(f"eval.entry_point: {_ENTRY_POINT}")
        _check_options(self.eval)

    def eval_options(self) -> EvalOptions:
        """The options every request of the run carries: `eval`, with the reward fields that ask the
        judge to report `reward` (drkernel.reward.reward_options). Where no preset says it, the fields
        stay the defaults: the judge's own `reward` then differs, and the agent's environment, which
        rewards each turn with `reward`, replaces it."""
        return self.eval.replace(**(reward_options(self.reward) or {}))


_PLAIN_OPTIONS = EvalOptions()
# the prompt, the code extraction and the reference all name the problem's class, so its requests carry it
_ENTRY_POINT = ("each problem names its own (the class its reference defines: Problem.entry_point, a data "
                "row's extra_info.entry_point), and its requests carry that one: the run does not set it")


def _check_options(options: EvalOptions) -> None:
    """The checks every judge makes of a request's options, made when the config is built: a judge
    refuses each request of a run with options it rejects, and the run trained on nothing."""
    try:
        validate_request(EvalRequest(reference_code="", kernel_code="", options=options))
    except ConfigError as exc:
        raise ConfigError(f"eval.{exc}") from None


# -- (de)serialisation ---------------------------------------------------------------------------


def to_dict(cfg: Any) -> dict[str, Any]:
    """A JSON-ready dict (tuples become lists). A RunConfig's `judge` says its `executor` first, its
    secrets (config_layout.SECRET_KEYS) are null, and its `eval` leaves out the reward's fields (they
    are `reward`) and the entry point (each problem's own)."""
    out: dict[str, Any] = json.loads(json.dumps(dataclasses.asdict(cfg)))
    if isinstance(cfg, RunConfig):
        out["judge"] = judge_dict(cfg.judge)
        for name in (*EVAL_REWARD_FIELDS, "entry_point"):
            del out["eval"][name]
    return out


def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _convert(value: Any, tp: Any, key: str) -> Any:
    """Check/convert a JSON or parsed value to the annotated type `tp`."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        choices = _executor_choices(tp)
        if choices:
            return _executor_config(value, choices, key)
        errors = []
        for arg in (a for a in args if a is not type(None)):
            try:
                return _convert(value, arg, key)
            except ConfigError as exc:
                errors.append(str(exc))
        raise ConfigError(errors[0] if errors else f"{key}: cannot be None")
    if origin is Literal:
        if value not in args:
            raise ConfigError(f"{key}: {value!r} is not one of {', '.join(map(repr, args))}")
        return value
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{key}: expected a list, got {value!r}")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_convert(v, args[0], key) for v in value)
        if len(value) != len(args):
            raise ConfigError(f"{key}: expected {len(args)} values, got {len(value)}")
        return tuple(_convert(v, a, key) for v, a in zip(value, args, strict=True))
    if dataclasses.is_dataclass(tp):
        if isinstance(value, tp):  # type: ignore[arg-type]
            return value
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a mapping, got {value!r}")
        return from_dict(tp, value, key)  # type: ignore[arg-type]
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{key}: expected true or false, got {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{key}: expected an integer, got {value!r}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{key}: expected a number, got {value!r}")
        if not math.isfinite(value):  # JSON's NaN and Infinity, in a config.json or a --set value
            raise ConfigError(f"{key}: expected a finite number, got {value!r}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{key}: expected a string, got {value!r}")
        return value
    return value


def _executor_config(value: Any, choices: dict[str, type[Any]], key: str) -> Any:
    """An executor config from `{"executor": NAME, its fields...}` (NAME: one of `choices`)."""
    if isinstance(value, tuple(choices.values())):
        return value
    if not isinstance(value, dict):
        raise ConfigError(f"{key}: expected a mapping with {key}.executor, got {value!r}")
    fields = dict(value)
    name = fields.pop("executor", "local")
    if name not in choices:
        raise ConfigError(f"{key}.executor: {name!r} is not one of {' | '.join(choices)}")
    return from_dict(choices[name], fields, key, f" (of {key}.executor={name})")


def from_dict(cls: type[Any], data: dict[str, Any], prefix: str = "", where: str = "") -> Any:
    """Build dataclass `cls` from a dict such as to_dict() wrote; unknown keys raise ConfigError, and
    so do keys that are no longer there (config_layout.retired: the message says where they went)."""
    hints = _hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    for name in data:
        went = retired(f"{prefix}.{name}" if prefix else name)
        if went:
            raise ConfigError(f"{prefix}.{name}: {went}" if prefix else f"{name}: {went}")
    unknown = set(data) - names
    if unknown:
        raise ConfigError(f"{prefix or cls.__name__}: unknown key(s) {', '.join(sorted(unknown))}{where}")
    kwargs = {k: _convert(v, hints[k], f"{prefix}.{k}" if prefix else k) for k, v in data.items()}
    return _built(cls, prefix, lambda: cls(**kwargs))


# components whose own checks name the section they have elsewhere (`drkernel serve`'s executor, the
# judges' settings) -> that name; in a run config they sit where the user typed them (judge, judge.judge)
_OWN_SECTION: dict[type[Any], str] = {**{cls: "executor" for cls in EXECUTORS.values()},
                                      JudgeSettings: "judge"}


def _built(cls: type[Any], key: str, build: typing.Callable[[], Any]) -> Any:
    """`build()`, a config of `cls` at `key`; its own check's message names `key` (`judge.devices`, not
    `executor.devices`)."""
    try:
        return build()
    except ConfigError as exc:
        own, text = _OWN_SECTION.get(cls), str(exc)
        if own and key and text.startswith(f"{own}."):
            raise ConfigError(key + text.removeprefix(own)) from None
        raise


def save_config(cfg: RunConfig, path: str | Path) -> None:
    """Written whole or not at all: a run that resumes compares its config with this file."""
    write_text_atomically(path, json.dumps(to_dict(cfg), indent=2) + "\n")


def load_config(path: str | Path) -> RunConfig:
    """A RunConfig from a config.json; a file that cannot be read or holds no config is a ConfigError."""
    try:
        data = json.loads(Path(path).read_bytes())
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except ValueError as exc:  # JSONDecodeError, or bytes that are no text
        raise ConfigError(f"{path}: not JSON (a config.json as `--print-config` writes it): {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a JSON object (a config.json as `--print-config` writes it)")
    try:  # the file named: its setting may be one that a --set beside it gives right
        cfg = from_dict(RunConfig, moved(data))
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    assert isinstance(cfg, RunConfig)
    return cfg


# -- --set key=value -----------------------------------------------------------------------------


def _parse_text(text: str) -> Any:
    """A --set value: JSON when it parses (numbers, true/false/null, lists), else "a,b" lists or a string."""
    low = text.strip()
    if low.lower() in ("none", "null"):
        return None
    if low.lower() in ("true", "false"):
        return low.lower() == "true"
    try:
        return json.loads(low)
    except json.JSONDecodeError:
        pass
    if "," in low:
        return [_parse_text(part) for part in low.split(",")]
    return text


def _coerce_text(value: Any, tp: Any) -> Any:
    """Let "1" set a str field, "x" a one-item tuple (optional or not), and "1e-6" a float."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is str and not isinstance(value, str):
        return json.dumps(value) if not isinstance(value, (int, float)) else str(value)
    if origin is tuple and not isinstance(value, (list, tuple)):
        return [value]
    if (  # an optional list (`judge.devices=cuda:0`): one value is a list of one
        origin in (typing.Union, types.UnionType)
        and any(typing.get_origin(a) is tuple for a in args)
        and value is not None
        and not isinstance(value, (list, tuple))
    ):
        return [value]
    if (
        origin in (typing.Union, types.UnionType)
        and str in args
        and not isinstance(value, str)
        and value is not None
    ):
        return str(value)
    return value


def _is_text(tp: Any) -> bool:
    """`str` or `str | None`: a field whose --set value is the text itself, never a list."""
    return tp is str or (typing.get_origin(tp) in (typing.Union, types.UnionType)
                         and set(typing.get_args(tp)) == {str, type(None)})


def config_keys(cls: type[Any] = RunConfig, prefix: str = "") -> list[str]:
    """Every settable dotted key of a config class (nested dataclasses expanded; an executor config's
    `executor` and the fields of each executor it may be)."""
    keys: list[str] = []
    for name, tp in _hints(cls).items():
        key = f"{prefix}{name}"
        executors = _executor_choices(tp)
        if executors:
            keys.append(key + ".executor")
            for choice in executors.values():
                keys.extend(k for k in config_keys(choice, key + ".") if k not in keys)
            continue
        inner = [a for a in typing.get_args(tp) if dataclasses.is_dataclass(a)] or (
            [tp] if dataclasses.is_dataclass(tp) else []
        )
        if inner:
            keys.extend(config_keys(inner[0], key + "."))  # type: ignore[arg-type]
        else:
            keys.append(key)
    return [k for k in keys if retired(k) is None and k != "eval.entry_point"]


def _executor_choices(tp: Any) -> dict[str, type[Any]]:
    """{name: Config} of an annotation that is a union of executor configs ({} for any other)."""
    args = typing.get_args(tp)
    if typing.get_origin(tp) not in (typing.Union, types.UnionType) or not all(
            a in EXECUTORS.values() for a in args):
        return {}
    return {name: cls for name, cls in EXECUTORS.items() if cls in args}


def _set_executor(config: Any, choices: dict[str, type[Any]], path: list[str], raw: str, full: str) -> Any:
    """`--set judge.executor=NAME` (a fresh config of NAME, unless it is NAME's already), or a field of
    the executor the config is now."""
    section = ".".join(full.split(".")[: -len(path)])
    if path == ["executor"]:
        name = _parse_text(raw)
        if name not in choices:
            raise ConfigError(f"--set {full}: {name!r} is not one of {' | '.join(choices)}")
        return config if type(config) is choices[name] else choices[name]()
    if path[0] not in _hints(type(config)):
        having = [n for n, cls in choices.items() if path[0] in _hints(cls)]
        first = f"; set {section}.executor={' or '.join(having)} first" if having else ""
        raise ConfigError(f"--set {full}: {section}.executor={executor_name(config)} has no key "
                          f"{path[0]!r}{first}")
    return _set(config, path, raw, full)


def _set(obj: Any, path: list[str], raw: str, full: str) -> Any:
    name = path[0]
    hints = _hints(type(obj))
    if name not in hints:
        choices = ", ".join(sorted(hints))
        raise ConfigError(f"--set {full}: unknown key {name!r} (choose from {choices})")
    tp = hints[name]
    if len(path) == 1:
        parsed = _parse_text(raw)
        if parsed is not None and _is_text(tp):  # a name, path or URL: as given, commas and all
            parsed = raw
        value = _convert(_coerce_text(parsed, tp), tp, full)
        section = full.removesuffix(f".{name}")
        return _built(type(obj), section, lambda: dataclasses.replace(obj, **{name: value}))
    executors = _executor_choices(tp)
    if executors:
        return dataclasses.replace(obj, **{name: _set_executor(getattr(obj, name), executors, path[1:], raw,
                                                                full)})
    child = getattr(obj, name)
    if child is None:
        dc = [a for a in typing.get_args(tp) if dataclasses.is_dataclass(a)]
        if not dc:
            raise ConfigError(f"--set {full}: {name!r} has no sub-keys")
        child = dc[0]()  # type: ignore[operator]
    if not dataclasses.is_dataclass(child):
        raise ConfigError(f"--set {full}: {name!r} has no sub-keys")
    return dataclasses.replace(obj, **{name: _set(child, path[1:], raw, full)})


def apply_overrides(cfg: RunConfig, overrides: list[str] | tuple[str, ...]) -> RunConfig:
    """Apply `key=value` edits in order; each value is type-checked against its field.

    >>> apply_overrides(RunConfig(), ["rl.advantage=grpo", "rl.mrs.bounds=0.99,1.01"]).rl.mrs.bounds
    (0.99, 1.01)
    """
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set {item!r}: expected key=value")
        key = MOVED_KEYS.get(key.strip(), key.strip())
        went = retired(key)
        if went:
            raise ConfigError(f"--set {key}: {went}")
        if key in SHORTHANDS and isinstance(_parse_text(raw), str):
            key = f"{key}.{SHORTHANDS[key]}"
        try:
            if key in PRESETS and isinstance(_parse_text(raw), str):
                cfg = dataclasses.replace(cfg, **{key: preset(key, _parse_text(raw))})
                continue
            cfg = _set(cfg, key.split("."), raw, key)
        except TypeError as exc:  # a constructor rejected the combination
            raise ConfigError(f"--set {item}: {exc}") from None
    return cfg
