"""Trainer state (model, tokenizer, optimizer, RNG, step, data cursor) <-> run_dir/checkpoints/.

A checkpoint is written into a temporary folder and renamed into place (atomic on POSIX), then the
`latest` pointer is replaced atomically: a crash at any moment leaves the previous checkpoint whole.
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import random
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from drkernel.errors import ConfigError
from drkernel.files import write_text_atomically

__all__ = [
    "TrainState", "latest_checkpoint", "load_checkpoint", "rng_state", "save_checkpoint", "set_rng_state",
    "torch_seed",
]

log = logging.getLogger(__name__)

_PREFIX = "step_"


@dataclass(slots=True)
class TrainState:
    step: int = 0  # completed steps
    cursor: int = 0  # prompts drawn from the data so far
    extra: dict[str, Any] | None = None


def torch_seed(value: int) -> int:
    """`value` (a config's seed, or a seed derived from it) as torch's seeding takes it: wrapped to 64
    bits, as torch wraps a negative seed itself, so that every seed that worked seeds the same. Any
    other was a ValueError mid-run (`trainer.seed=$(date +%s%N)` times 100_003).

    >>> torch_seed(-1) == 2**64 - 1, torch_seed(7)
    (True, 7)
    """
    return value % 2**64


def rng_state() -> dict[str, Any]:
    """The Python, torch and CUDA random states, as a checkpoint keeps them."""
    state: dict[str, Any] = {"python": random.getstate(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _write_pointer(root: Path, name: str) -> None:
    write_text_atomically(root / "latest", name + "\n")


def save_checkpoint(
    root: str | Path, state: TrainState, model: Any, tokenizer: Any, optimizer: Any, *, keep: int = 2
) -> Path:
    """Write checkpoints/step_XXXXXX atomically, point `latest` at it, keep the newest `keep`."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    name = f"{_PREFIX}{state.step:06d}"
    final = root / name
    tmp = root / f".{name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    model.save_pretrained(tmp / "model", safe_serialization=True)
    if tokenizer is not None:
        tokenizer.save_pretrained(tmp / "model")
    torch.save({"optimizer": optimizer.state_dict(), "rng": rng_state()}, tmp / "trainer.pt")
    (tmp / "state.json").write_text(
        json.dumps({"step": state.step, "cursor": state.cursor, "extra": state.extra or {}}) + "\n"
    )
    for f in tmp.rglob("*"):  # flush file contents before the rename makes them visible
        if f.is_file():
            with open(f, "rb") as fh:
                os.fsync(fh.fileno())
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    _write_pointer(root, name)
    _prune(root, keep)
    return final


def _complete(root: Path) -> list[Path]:
    dirs = [d for d in root.glob(f"{_PREFIX}*") if d.is_dir() and (d / "state.json").is_file()]
    return sorted(dirs, key=lambda d: d.name)


def _prune(root: Path, keep: int) -> None:
    for d in _complete(root)[:-keep]:
        shutil.rmtree(d, ignore_errors=True)
    for d in root.glob(f".{_PREFIX}*.tmp-*"):  # left by a crash mid-write
        if d.is_dir():
            shutil.rmtree(d, ignore_errors=True)


def latest_checkpoint(root: str | Path) -> Path | None:
    """The checkpoint `latest` names, else the newest complete one, else None."""
    root = Path(root)
    if not root.is_dir():
        return None
    pointer = root / "latest"
    if pointer.is_file():
        cand = root / pointer.read_text().strip()
        if (cand / "state.json").is_file():
            return cand
    found = _complete(root)
    return found[-1] if found else None


def load_checkpoint(path: str | Path, optimizer: Any) -> TrainState:
    """Restore optimizer and RNG state from a checkpoint folder (the model is loaded by the caller
    from path/model); returns the step and data cursor."""
    path = Path(path)
    try:
        meta = json.loads((path / "state.json").read_text())
        state = TrainState(step=int(meta["step"]), cursor=int(meta["cursor"]), extra=meta.get("extra") or {})
        blob = torch.load(path / "trainer.pt", map_location="cpu", weights_only=False)
        optimizer_state, rng = blob["optimizer"], blob["rng"]
    # (a state.json of another shape: KeyError, TypeError, ValueError; a torn trainer.pt: pickle's)
    except (OSError, RuntimeError, ValueError, KeyError, TypeError, AttributeError, EOFError,
            pickle.UnpicklingError) as exc:
        raise ConfigError(f"checkpoint {path}: unreadable ({type(exc).__name__}: {exc})") from None
    optimizer.load_state_dict(optimizer_state)
    set_rng_state(rng)
    return state
