"""Per-step metrics -> run_dir/metrics.jsonl (one JSON object a line) and TensorBoard events.

On resume, lines of steps after the restored checkpoint are dropped (they will be run again), so the
file always holds each completed step once. NaN ("not measured") is written as null.
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Any

__all__ = ["RunLog", "read_metrics"]

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


class RunLog:
    def __init__(self, run_dir: str | Path, *, resume_step: int = 0, tensorboard: bool = True) -> None:
        self.path = Path(run_dir) / "metrics.jsonl"
        kept = [r for r in read_metrics(self.path) if int(r.get("step", 0)) <= resume_step]
        self.path.write_text("".join(json.dumps(r) + "\n" for r in kept))
        self._tb: Any = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:
                log.warning("tensorboard is not installed: metrics go to %s only", self.path)
            else:
                self._tb = SummaryWriter(str(Path(run_dir) / "tensorboard"), purge_step=resume_step + 1)

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

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()
            self._tb = None
