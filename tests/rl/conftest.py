"""Training tests stay off Weights & Biases, whatever the developer's environment holds (a test that
means to log there sets its own WANDB_MODE)."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _no_wandb(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WANDB_MODE", "disabled")
