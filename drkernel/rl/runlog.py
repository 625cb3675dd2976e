"""Per-step metrics -> run_dir/metrics.jsonl (one JSON object a line), TensorBoard events, and
Weights & Biases when it is installed and set up (log.wandb).

On resume, lines of steps after the restored checkpoint are dropped (they will be run again), so the
file always holds each completed step once. NaN ("not measured") is written as null.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import math
import netrc
import os
import secrets
from pathlib import Path
from typing import Any

from drkernel.errors import ConfigError
from drkernel.files import write_text_atomically

__all__ = ["RunLog", "read_metrics", "require_wandb", "wandb_wanted"]

log = logging.getLogger(__name__)


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """The records of a metrics.jsonl; a torn last line (a killed writer) is skipped."""
    out: list[dict[str, Any]] = []
    p = Path(path)
    if not p.exists():
        return out
    for line in p.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


def require_wandb(setting: str) -> None:
    """log.wandb=on with no wandb package is a ConfigError, said before a run starts: the run trained
    without W&B, a warning among the model's loading lines the only sign of it."""
    if setting == "on" and importlib.util.find_spec("wandb") is None:
        raise ConfigError("log.wandb=on: the wandb package is not installed (pip install wandb); "
                          "log.wandb=auto logs to W&B only where it is installed and set up")


def wandb_wanted(setting: str) -> bool:
    """Whether to log to Weights & Biases: "on", or "auto" with the package installed and set up."""
    if setting == "off":
        return False
    if setting == "on":
        return True
    if importlib.util.find_spec("wandb") is None:
        return False
    if os.environ.get("WANDB_MODE", "").strip().lower() == "disabled":
        return False
    if os.environ.get("WANDB_API_KEY") or os.environ.get("WANDB_MODE"):
        return True
    try:  # `wandb login` keeps the key in ~/.netrc
        return netrc.netrc().authenticators("api.wandb.ai") is not None
    except (OSError, netrc.NetrcParseError):
        return False


class RunLog:
    def __init__(self, run_dir: str | Path, *, resume_step: int = 0, tensorboard: bool = True,
                 wandb: str = "off", wandb_project: str = "drkernel", run_name: str | None = None,
                 config: dict[str, Any] | None = None) -> None:
        self.path = Path(run_dir) / "metrics.jsonl"
        kept = [r for r in read_metrics(self.path) if int(r.get("step", 0)) <= resume_step]
        write_text_atomically(self.path, "".join(json.dumps(r) + "\n" for r in kept))  # whole or old
        self._tb: Any = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:
                log.warning("tensorboard is not installed: metrics go to %s only", self.path)
            else:
                self._tb = SummaryWriter(str(Path(run_dir) / "tensorboard"), purge_step=resume_step + 1)
        self._wandb: Any = None
        if wandb_wanted(wandb):
            self._wandb = _start_wandb(Path(run_dir), wandb_project, run_name, config)

    def write(self, step: int, metrics: dict[str, Any]) -> None:
        record = _clean({"step": step, **metrics})
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")
            f.flush()
        if self._tb is not None:
            for key, value in record.items():
                if key != "step" and isinstance(value, (int, float)) and not isinstance(value, bool):
                    self._tb.add_scalar(key, value, step)
            self._tb.flush()
        if self._wandb is not None:
            self._wandb.log(
                {k: v for k, v in record.items() if k != "step" and v is not None} | {"trainer/step": step}
            )

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()
            self._tb = None
        if self._wandb is not None:
            self._wandb.finish()
            self._wandb = None


def _start_wandb(run_dir: Path, project: str, name: str | None, config: dict[str, Any] | None) -> Any:
    """A W&B run for run_dir (resumed under the same id when the folder is run again), or None."""
    try:
        import wandb
    except ImportError:
        log.warning(
            "log.wandb=on but the wandb package is not installed (pip install wandb): not logging to W&B"
        )
        return None
    id_file = run_dir / "wandb_run_id"
    run_id = id_file.read_text().strip() if id_file.exists() else secrets.token_hex(4)
    try:
        run = wandb.init(
            project=project, name=name, id=run_id, resume="allow", dir=str(run_dir), config=config
        )
    except Exception as exc:  # noqa: BLE001 - logging must never stop a training run
        log.warning(
            "Weights & Biases did not start (%s): metrics go to %s and TensorBoard only", exc, run_dir
        )
        return None
    id_file.write_text(run_id)
    # steps are logged as a metric: a resumed run re-logs steps after its checkpoint, which W&B's own
    # step counter (monotonic) would drop
    run.define_metric("trainer/step")
    run.define_metric("*", step_metric="trainer/step")
    return run
