"""Problems + kernel variants -> a tiny randomly initialised causal LM and a word-level tokenizer.

Built locally with `tokenizers` (no download). Besides a few filler words, the vocabulary holds one
"macro" token per kernel variant that decodes to the variant's whole fenced source, so a tiny model
samples real submissions for the real judge, and learns which one the judge rewards.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from drkernel.errors import ConfigError, ProblemError
from drkernel.rl.checkpoint import torch_seed
from drkernel.rl.config import TinyModelConfig
from drkernel.types import Problem

__all__ = ["CHAT_TEMPLATE", "build_tiny", "builtin_variants", "macro_text", "passthrough_source"]

PAD, UNK, EOS = "[PAD]", "[UNK]", "<|end|>"
ROLE_TAGS = ("<|system|>", "<|user|>", "<|assistant|>")
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|> {{ m['content'] }} <|end|> {% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def macro_text(code: str) -> str:
    """The text a macro token decodes to: the source in a python fence on its own lines."""
    return f"\n```python\n{code.strip()}\n```\n"


def passthrough_source(problem: Problem) -> str:
    """The reference's own torch code renamed ModelNew, importing triton: a hack (decoy) to catch."""
    code = re.sub(
        rf"\b{re.escape(problem.entry_point)}\b", problem.entry_point + "New", problem.reference_code
    )
    return "import triton  # noqa: F401\n" + code


def builtin_variants(problems: Sequence[Problem], names: Sequence[str]) -> dict[str, dict[str, str]]:
    """{problem name: {variant: source}} for "honest" (built-in solution) and "passthrough"."""
    from drkernel.problems import builtin_solution

    out: dict[str, dict[str, str]] = {}
    for p in problems:
        variants: dict[str, str] = {}
        for name in names:
            if name == "honest":
                try:
                    variants[name] = builtin_solution(p.name)
                except ProblemError:
                    continue
            elif name == "passthrough":
                variants[name] = passthrough_source(p)
            else:
                raise ConfigError(f"model.tiny.variants: unknown variant {name!r} (honest | passthrough)")
        out[p.name] = variants
    return out


def _tokenizer(config: TinyModelConfig, macros: list[str]) -> Any:
    from tokenizers import AddedToken, Tokenizer, models, pre_tokenizers  # type: ignore[import-untyped]
    from transformers import PreTrainedTokenizerFast

    words = [PAD, UNK, EOS, *ROLE_TAGS, *dict.fromkeys(config.filler_words)]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token=UNK))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.add_tokens([AddedToken(m, normalized=False, special=False) for m in macros])
    tok.add_special_tokens([PAD, EOS])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token=UNK, pad_token=PAD, eos_token=EOS)
    fast.chat_template = CHAT_TEMPLATE
    return fast


def build_tiny(
    config: TinyModelConfig,
    variants: Mapping[str, Mapping[str, str]],
    *,
    seed: int = 0,
) -> tuple[Any, Any]:
    """(model, tokenizer): a Qwen2-architecture model of `config`'s size, randomly initialised."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    macros = list(dict.fromkeys(macro_text(src) for v in variants.values() for src in v.values()))
    if not macros:
        raise ConfigError("model.tiny: no kernel variants to put in the vocabulary")
    tokenizer = _tokenizer(config, macros)
    model_config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=config.hidden_size,
        intermediate_size=2 * config.hidden_size,
        num_hidden_layers=config.layers,
        num_attention_heads=config.heads,
        num_key_value_heads=config.heads,
        max_position_embeddings=config.max_positions,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )
    gen = torch.random.fork_rng(devices=[])
    with gen:
        torch.manual_seed(torch_seed(seed))
        model = Qwen2ForCausalLM(model_config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model, tokenizer
