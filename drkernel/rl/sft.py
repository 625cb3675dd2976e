"""Chat trajectories (JSONL or parquet with `messages`) -> multi-turn SFT of a causal LM -> a model folder.

The cold-start stage (docs/paper_spec.md §9.2): whole conversations, loss on the assistant turns only (each
assistant message and the template's end-of-turn tokens after it), token-mean over the batch.
LoRA adapters with peft when sft.lora_rank > 0; they are merged into the saved model.
"""

from __future__ import annotations

import json
import logging
import math
import os
import random
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from drkernel.errors import ConfigError
from drkernel.rl.checkpoint import torch_seed
from drkernel.rl.config import SFTConfig
from drkernel.rl.progress import Progress
from drkernel.rl.runlog import RunLog, require_wandb

__all__ = ["Example", "assistant_spans", "load_conversations", "run_sft", "tokenize_conversation"]

log = logging.getLogger(__name__)

Messages = list[dict[str, str]]


@dataclass(slots=True)
class Example:
    input_ids: list[int]
    labels: list[bool]  # True on the tokens the loss is taken on


def load_conversations(path: str | Path) -> list[Messages]:
    """The `messages` of every record of a .jsonl (drkernel trajectories, the authors' cold-start
    rows) or .parquet file. Records without messages are skipped with a warning."""
    p = Path(path)
    if not p.exists():
        raise ConfigError(f"sft data {p}: no such file")
    if p.is_dir():
        raise ConfigError(f"sft data {p}: is a folder, not a .jsonl or .parquet file")
    if p.suffix == ".parquet":
        try:
            import pyarrow.parquet as pq  # type: ignore[import-untyped]
        except ModuleNotFoundError as exc:
            raise ConfigError("parquet data needs pyarrow (pip install pyarrow)") from exc
        try:
            records = pq.read_table(p, columns=["messages"]).to_pylist()
        except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError
            raise ConfigError(f"sft data {p}: not a parquet file with a `messages` column ({exc})") from None
    else:
        records = _read_jsonl(p)
    out = []
    for i, rec in enumerate(records):
        exact = _exact_turns(rec)
        if exact is not None:  # the record's history was cut or edited: train on what was sent
            out.extend(exact)
            continue
        msgs = rec.get("messages") if isinstance(rec, dict) else None
        if msgs and (
            not isinstance(msgs, list)
            or not all(isinstance(m, dict) and "role" in m and "content" in m for m in msgs)
        ):
            raise ConfigError(
                f"sft data {p}: record {i + 1}: `messages` must be a list of {{role, content}} objects"
            )
        if not msgs or not any(m.get("role") == "assistant" for m in msgs):
            log.warning("%s: record %d has no assistant message; skipped", p, i + 1)
            continue
        for k, m in enumerate(msgs):
            if not isinstance(m["content"], str):
                raise ConfigError(f"sft data {p}: record {i + 1}: message {k + 1}'s content is not text "
                                  f"({str(m['content'])[:60]!r})")
        out.append([{"role": str(m["role"]), "content": m["content"]} for m in msgs])
    if not out:
        raise ConfigError(f"sft data {p}: no conversation with an assistant message")
    return out


def _exact_turns(rec: Any) -> list[Messages] | None:
    """A drkernel trajectory whose `messages` is not what each turn was sent (a top-w context, or a
    prompt the token budget shrank): one conversation per turn, its exact prompt and its answer.
    None for any other record (its `messages` are used as they are)."""
    if not isinstance(rec, dict) or rec.get("messages_exact", True) or not isinstance(rec.get("turns"), list):
        return None
    from drkernel.agent.trajectories import Trajectory, rl_rows

    try:
        traj = Trajectory.from_dict(rec)
    except (KeyError, TypeError, ValueError):
        return None
    return [[*row["prompt"], {"role": "assistant", "content": str(row["response"])}]
            for row in rl_rows(traj) if row["response"]]


def _read_jsonl(p: Path) -> list[Any]:
    """The records of a JSONL file. A torn last line (a writer killed mid-line) is skipped with a
    warning; any other line that is not JSON is an error naming the file and the line."""
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"sft data {p}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    lines = text.splitlines()
    records = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as exc:
            if number == len(lines) and not text.endswith("\n"):
                log.warning("%s:%d: torn last line (no newline, not JSON); skipped", p, number)
                continue
            raise ConfigError(
                f"sft data {p}:{number}: not a JSON object ({exc.msg} at column {exc.colno})"
            ) from None
    return records


def _render(tokenizer: Any, messages: Messages, generation_prompt: bool) -> str:
    if getattr(tokenizer, "chat_template", None):
        return str(
            tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt)
        )
    text = "".join(f"<|{m['role']}|>\n{m['content']}\n" for m in messages)
    return text + ("<|assistant|>\n" if generation_prompt else "")


def assistant_spans(tokenizer: Any, messages: Messages) -> tuple[str, list[tuple[int, int]]]:
    """The rendered conversation and the character spans [start, end) trained on.

    A span starts at the assistant's content and ends where the conversation up to that message ends
    (its end-of-turn tokens included) when the template renders prefixes consistently, else at the
    end of the content.
    """
    full = _render(tokenizer, messages, False)
    spans = []
    cursor = 0
    for i, m in enumerate(messages):
        if m["role"] != "assistant":
            continue
        start = full.find(m["content"], cursor) if m["content"] else -1
        if start < 0:
            prefix = _render(tokenizer, messages[:i], True)
            start = len(prefix) if full.startswith(prefix) else cursor
        end = start + len(m["content"])
        upto = _render(tokenizer, messages[: i + 1], False)
        if full.startswith(upto) and len(upto) >= end:
            end = len(upto)
        spans.append((start, end))
        cursor = end
    return full, spans


def tokenize_conversation(tokenizer: Any, messages: Messages, max_length: int) -> Example:
    """Token ids and the assistant-token label mask, right-truncated to `max_length`."""
    text, spans = assistant_spans(tokenizer, messages)
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    ids = [int(x) for x in enc["input_ids"]][:max_length]
    labels = []
    for a, b in enc["offset_mapping"][: len(ids)]:
        labels.append(any(s <= a and b <= e and b > a for s, e in spans))
    return Example(ids, labels)


def _batches(examples: list[Example], cfg: SFTConfig, epoch: int) -> list[list[Example]]:
    order = list(range(len(examples)))
    random.Random(cfg.seed * 7919 + epoch).shuffle(order)
    return [
        [examples[i] for i in order[k : k + cfg.batch_size]] for k in range(0, len(order), cfg.batch_size)
    ]


def _micro_loss(
    model: Any, chunk: list[Example], pad_id: int, total_tokens: float
) -> tuple[torch.Tensor, float]:
    device = next(model.parameters()).device
    width = max(len(e.input_ids) for e in chunk)
    ids = torch.full((len(chunk), width), pad_id, dtype=torch.long)
    attn = torch.zeros((len(chunk), width), dtype=torch.long)
    lab = torch.zeros((len(chunk), width), dtype=torch.bool)
    for r, e in enumerate(chunk):
        ids[r, : len(e.input_ids)] = torch.tensor(e.input_ids)
        attn[r, : len(e.input_ids)] = 1
        lab[r, : len(e.labels)] = torch.tensor(e.labels, dtype=torch.bool)
    ids, attn, lab = ids.to(device), attn.to(device), lab.to(device)
    logits = model(input_ids=ids, attention_mask=attn).logits[:, :-1].float()
    nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), ids[:, 1:], reduction="none")
    mask = lab[:, 1:]
    return (nll * mask).sum() / total_tokens, float((nll * mask).sum().item())


def _lr_at(cfg: SFTConfig, step: int, total: int) -> float:
    warm = int(cfg.warmup_ratio * total)
    if step <= warm:
        return cfg.lr * step / max(warm, 1)
    if cfg.schedule == "cosine":
        return cfg.lr * 0.5 * (1 + math.cos(math.pi * (step - warm) / max(total - warm, 1)))
    return cfg.lr


def _with_lora(model: Any, cfg: SFTConfig) -> Any:
    try:
        import peft
    except ModuleNotFoundError as exc:
        raise ConfigError("sft.lora_rank > 0 needs peft (pip install peft)") from exc
    lora = peft.LoraConfig(r=cfg.lora_rank, lora_alpha=cfg.lora_alpha, target_modules="all-linear",
                           task_type="CAUSAL_LM")
    return peft.get_peft_model(model, lora)


def _save(model: Any, tokenizer: Any, out: Path) -> Path:
    """Write out/model atomically (LoRA adapters merged in)."""
    final, tmp = out / "model", out / f".model.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    to_save = model.merge_and_unload() if hasattr(model, "merge_and_unload") else model
    to_save.save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    return final


def run_sft(
    cfg: SFTConfig, conversations: list[Messages], model: Any, tokenizer: Any, out_dir: str | Path,
    *, tensorboard: bool = True, wandb: str = "off", run_config: dict[str, Any] | None = None,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Train `model` on the conversations; write out_dir/model and out_dir/metrics.jsonl."""
    require_wandb(wandb)  # before out_dir is made: as `drkernel train sft` says it
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(torch_seed(cfg.seed))
    examples = [tokenize_conversation(tokenizer, c, cfg.max_length) for c in conversations]
    examples = [e for e in examples if any(e.labels[1:])]
    if not examples:
        raise ConfigError("sft: no example keeps an assistant token after truncation (raise sft.max_length)")
    if cfg.lora_rank > 0:
        model = _with_lora(model, cfg)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr, betas=cfg.betas, weight_decay=cfg.weight_decay)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    total = cfg.epochs * math.ceil(len(examples) / cfg.batch_size)
    runlog = RunLog(
        out, resume_step=0, tensorboard=tensorboard, wandb=wandb, run_name="sft", config=run_config
    )
    model.train()
    step, last = 0, math.nan
    bar = (progress or Progress(enabled=False)).bar("sft", total, "steps")
    try:
        for epoch in range(cfg.epochs):
            for batch in _batches(examples, cfg, epoch):
                step += 1
                tokens = float(sum(sum(e.labels[1:]) for e in batch))
                nll_sum = 0.0
                for k in range(0, len(batch), cfg.micro_batch_size):
                    loss, part = _micro_loss(model, batch[k : k + cfg.micro_batch_size], int(pad), tokens)
                    loss.backward()
                    nll_sum += part
                grad_norm = float(torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip).item())
                lr = _lr_at(cfg, step, total)
                for g in opt.param_groups:
                    g["lr"] = lr
                opt.step()
                opt.zero_grad(set_to_none=True)
                last = nll_sum / tokens
                runlog.write(step, {"sft/loss": last, "sft/grad_norm": grad_norm, "sft/lr": lr,
                                    "sft/tokens": tokens, "sft/epoch": epoch + 1})
                bar.set_postfix(f"epoch {epoch + 1}/{cfg.epochs}, loss {last:.4g}")
                bar.update(1)
    finally:
        bar.close()
        runlog.close()
    path = _save(model, tokenizer, out)
    return {"steps": step, "examples": len(examples), "final_loss": last, "model": str(path)}
