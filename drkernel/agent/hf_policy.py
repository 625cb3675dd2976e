"""A Policy backed by a local transformers causal LM (small models, CPU tests, debugging).

transformers is imported lazily. Prompts go through the tokenizer's chat template (or a plain
role-tagged fallback); token log-probs are taken from the raw logits (temperature 1, no top-p),
the quantity MRS compares against the trainer's (docs/paper_spec.md §6).
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from drkernel.agent.policy import Completion, SamplingParams
from drkernel.errors import ConfigError, PolicyError

__all__ = ["HFPolicy", "load_tokenizer", "model_source", "reword_load_errors"]


def _transformers() -> Any:
    try:
        import transformers
    except ModuleNotFoundError as exc:
        raise ConfigError("the hf policy needs transformers (pip install 'drkernel[train]')") from exc
    return transformers


@contextmanager
def reword_load_errors(what: str, path: str) -> Iterator[None]:
    """transformers' words for a path it cannot load (no such folder or hub id, a folder without the
    files) as one ConfigError line: `what` is the thing the user named ("model", "tokenizer"). The
    agent's models and tokenizers and the trainer's (rl/build.py) load under it."""
    try:
        yield
    except (OSError, ValueError) as exc:
        first = next((line for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
        raise ConfigError(f"{what} {path}: cannot load it ({first.strip()})") from None


def model_source(path: str, what: str = "model") -> str:
    """Where `path` (a model's or a tokenizer's: `what`) will be loaded from: "folder", "hub" or "cache"
    (a hub id whose files are in the local hub cache while the hub cannot be reached, or HF_HUB_OFFLINE
    is set). The trainer's models and tokenizers and the agent's (`--model`, `--tokenizer`) ask it.

    Decided at once, before transformers' downloads (whose retries took 52 s to fail without a
    network): a path that names no folder, a hub id the hub does not know, or one that is neither
    reachable nor cached is a ConfigError of one line."""
    marker = "config.json" if what == "model" else "tokenizer_config.json"
    folder = Path(path).expanduser()
    if folder.is_dir():
        if what == "model" and not (folder / marker).is_file():
            raise ConfigError(f"{what} {path}: a folder without config.json, not a model folder")
        return "folder"
    if folder.exists():
        raise ConfigError(f"{what} {path}: a file, not a {what} folder")
    if path.startswith((os.sep, ".", "~")) or path.count("/") > 1 or not path.strip():
        raise ConfigError(f"{what} {path}: no such folder")
    from huggingface_hub import constants, model_info, try_to_load_from_cache
    from huggingface_hub.errors import GatedRepoError, HfHubHTTPError, RepositoryNotFoundError

    cached = isinstance(try_to_load_from_cache(path, marker), str)
    if constants.HF_HUB_OFFLINE:
        if cached:
            return "cache"
        raise ConfigError(f"{what} {path}: not in the local hub cache, and HF_HUB_OFFLINE is set "
                          "(give a local folder, or download it first)")
    try:
        model_info(path, timeout=constants.HF_HUB_ETAG_TIMEOUT)
    except GatedRepoError:
        raise ConfigError(f"{what} {path}: gated on the hub: accept its terms there, set HF_TOKEN") from None
    except RepositoryNotFoundError:
        raise ConfigError(f"{what} {path}: no such folder, and no such model on the hub "
                          f"({constants.ENDPOINT}; a private model needs HF_TOKEN)") from None
    except HfHubHTTPError:
        return "hub"  # the hub answered, with some other error: transformers says what it is
    except Exception as exc:  # noqa: BLE001 - no connection, a timeout, a proxy's refusal: the network
        if cached:
            return "cache"
        raise ConfigError(f"{what} {path}: no such folder, and the hub ({constants.ENDPOINT}) cannot be "
                          f"reached ({type(exc).__name__}) while it is not in the local hub cache"
                          ) from None
    return "hub"


def load_tokenizer(path: str, *, trust_remote_code: bool = False, what: str = "tokenizer",
                   source: str | None = None) -> Any:
    """The tokenizer at `path` (a folder or a hub id; `what` names it in errors: "tokenizer", or "model"
    where it comes with the model; `source`: model_source's answer where the caller has it already);
    one ConfigError line when there is none, at once.
    AutoTokenizer, except for a bare `tokenizers` tokenizer (tiny models): AutoTokenizer would map it
    to the architecture's tokenizer class and lose the vocabulary."""
    tf = _transformers()
    local_only = (source or model_source(path, what)) == "cache"
    with reword_load_errors(what, path):
        cfg_file = Path(path) / "tokenizer_config.json"
        if cfg_file.is_file():
            cls = json.loads(cfg_file.read_text()).get("tokenizer_class")
            if cls in ("TokenizersBackend", "PreTrainedTokenizerFast"):
                return tf.PreTrainedTokenizerFast.from_pretrained(path)
        return tf.AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code,
                                                local_files_only=local_only)


class HFPolicy:
    @dataclass(frozen=True, slots=True, kw_only=True)
    class Config:
        model_path: str
        device: str = "cpu"
        dtype: str = "float32"  # "float32" | "bfloat16" | "float16"
        trust_remote_code: bool = False

        def build(self) -> HFPolicy:
            import torch

            tf = _transformers()
            dtype = getattr(torch, self.dtype, None)
            if not isinstance(dtype, torch.dtype):
                raise ConfigError(f"hf.dtype: unknown dtype {self.dtype!r}")
            source = model_source(self.model_path)
            tok = load_tokenizer(self.model_path, trust_remote_code=self.trust_remote_code, what="model",
                                 source=source)
            with reword_load_errors("model", self.model_path):
                model = tf.AutoModelForCausalLM.from_pretrained(
                    self.model_path, dtype=dtype, trust_remote_code=self.trust_remote_code,
                    local_files_only=source == "cache",
                )
            return HFPolicy(model.to(self.device), tok, name=self.model_path)

    def __init__(self, model: Any, tokenizer: Any, *, name: str | None = None) -> None:
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.name = name or getattr(model.config, "name_or_path", "hf-model")
        self._lock = threading.Lock()  # one generate() at a time on the shared model

    def count_tokens(self, text: str) -> int:
        return len(self.tokenizer.encode(text, add_special_tokens=False))

    def render(self, messages: list[dict[str, str]]) -> str:
        """The prompt text: the tokenizer's chat template, or role-tagged plain text."""
        if getattr(self.tokenizer, "chat_template", None):
            return str(
                self.tokenizer.apply_chat_template(
                    messages, tokenize=False, add_generation_prompt=True
                )
            )
        parts = [f"<|{m['role']}|>\n{m['content']}\n" for m in messages]
        return "".join(parts) + "<|assistant|>\n"

    def generate(
        self, messages: list[dict[str, str]], n: int = 1, sampling: SamplingParams | None = None
    ) -> list[Completion]:
        import torch

        sp = sampling or SamplingParams()
        enc = self.tokenizer(self.render(messages), return_tensors="pt", add_special_tokens=False)
        device = next(self.model.parameters()).device
        input_ids = enc["input_ids"].to(device)
        kwargs = self._generation_kwargs(sp, n)
        try:
            with self._lock, torch.no_grad():
                if sp.seed is not None:
                    torch.manual_seed(sp.seed)
                out = self.model.generate(
                    input_ids=input_ids,
                    attention_mask=torch.ones_like(input_ids),
                    **kwargs,
                )
        except (RuntimeError, ValueError) as exc:
            raise PolicyError(f"local generation failed: {exc}") from exc
        new = out.sequences[:, input_ids.shape[1] :]
        logp = torch.log_softmax(torch.stack(out.logits, dim=1).float(), dim=-1)
        chosen = logp.gather(-1, new.unsqueeze(-1)).squeeze(-1)
        return [self._completion(new[i], chosen[i], sp, input_ids.shape[1]) for i in range(n)]

    def _generation_kwargs(self, sp: SamplingParams, n: int) -> dict[str, Any]:
        tok = self.tokenizer
        pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        kwargs: dict[str, Any] = {
            "max_new_tokens": sp.max_tokens,
            "num_return_sequences": n,
            "return_dict_in_generate": True,
            "output_logits": True,
            "pad_token_id": pad,
            "eos_token_id": tok.eos_token_id,
        }
        if sp.temperature > 0:
            kwargs.update(do_sample=True, temperature=sp.temperature, top_p=sp.top_p, top_k=0)
        else:
            kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        return kwargs

    def _completion(self, ids: Any, logprobs: Any, sp: SamplingParams, prompt_len: int) -> Completion:
        eos = self.tokenizer.eos_token_id
        ids_list = [int(x) for x in ids.tolist()]
        length = len(ids_list)
        finish = "length"
        if eos is not None and eos in ids_list:
            length = ids_list.index(eos) + 1
            finish = "stop"
        ids_list = ids_list[:length]
        text = self.tokenizer.decode(ids_list, skip_special_tokens=True)
        for s in sp.stop:
            if s in text:
                text, finish = text[: text.index(s)], "stop"
        return Completion(
            text=text,
            finish_reason=finish,
            token_ids=ids_list,
            tokens=self.tokenizer.convert_ids_to_tokens(ids_list),
            logprobs=[float(x) for x in logprobs[:length].tolist()],
            prompt_tokens=prompt_len,
            completion_tokens=length,
        )
