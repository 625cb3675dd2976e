"""The executor seam: a batch of EvalRequests in, one EvalResult per request out, in order.

Implementations (build.py builds one from its Config): local.py (warm sandbox pool), ray.py, http.py, fake.py.
A bad kernel never raises: it comes back as a result. Infrastructure failures raise ExecutorError.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from drkernel.types import EvalRequest, EvalResult

__all__ = ["Executor"]


@runtime_checkable
class Executor(Protocol):
    def evaluate(self, requests: list[EvalRequest]) -> list[EvalResult]:
        """Judge every request; results come back in the order of `requests`."""
        ...

    def close(self) -> None:
        """Release workers and processes. Idempotent."""
        ...
