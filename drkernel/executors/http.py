"""The HTTP executor: the executor seam over a remote `drkernel serve` (its native /v1 API).

Input: a batch of EvalRequests; output: their EvalResults in request order, judged by the server's
workers. Every wait has a deadline; 429/503 are retried with backoff; httpx errors become
ExecutorError subclasses in `drkernel.executors.http_client.http_errors`, the one translation point.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from drkernel.errors import ConfigError, EvalTimeout, ExecutorError
from drkernel.settings import is_http_url
from drkernel.types import EvalRequest, EvalResult

if TYPE_CHECKING:  # the Config is importable without httpx (the `server`/`agent` extras)
    import httpx

__all__ = ["HttpExecutor"]


class HttpExecutor:
    """Executor whose workers are a server's; thread-safe (httpx.Client is)."""

    @dataclass(frozen=True, kw_only=True, slots=True)
    class Config:
        base_url: str = "http://127.0.0.1:8000"
        token: str | None = None
        priority: str = "normal"
        batch_timeout_s: float | None = None  # None: from the tasks' budgets and server capacity
        deadline_factor: float = 3.0
        deadline_grace_s: float = 60.0
        request_timeout_s: float = 60.0
        max_retries: int = 6
        cancel_timeout_s: float = 5.0  # the cancels of a batch past its deadline, all together

        def __post_init__(self) -> None:
            if not is_http_url(self.base_url):
                raise ConfigError(f"executor.base_url: {self.base_url!r} is not an http(s) URL")
            if self.priority not in ("high", "normal", "low"):
                raise ConfigError(f"executor.priority: {self.priority!r} not in high|normal|low")

        def build(self, transport: httpx.BaseTransport | None = None) -> HttpExecutor:
            return HttpExecutor(self, transport)

    def __init__(self, config: Config | None = None,
                 transport: httpx.BaseTransport | None = None) -> None:
        from drkernel.executors.http_client import Client, ClientConfig

        self.config = config or HttpExecutor.Config()
        self._client = Client(ClientConfig(
            base_url=self.config.base_url, token=self.config.token,
            request_timeout_s=self.config.request_timeout_s, max_retries=self.config.max_retries,
            cancel_timeout_s=self.config.cancel_timeout_s,
        ), transport=transport)
        self._transport = transport
        self._capacity: int | None = None
        self._closed = False

    @property
    def capacity(self) -> int:
        """The server's worker count (asked once)."""
        if self._capacity is None:
            self._capacity = _workers_total(self._client.health())
        return self._capacity

    def check_server(self, timeout_s: float = 10.0) -> None:
        """Ask the server's /health once, without the retries of a run (30 s of them): a client command
        says at its start that no drkernel server answers at its URL (ExecutorError), instead of failing
        each evaluation after the model's answer was spent on it. Then an empty wait on the native API,
        which takes the token where /health takes none: a missing or wrong token is a ConfigError now."""
        from drkernel.executors.http_client import Client, ClientConfig

        probe = Client(ClientConfig(base_url=self.config.base_url, token=self.config.token,
                                    request_timeout_s=timeout_s, max_retries=0), transport=self._transport)
        try:
            self._capacity = _workers_total(probe.health())
            probe.check_native_api()
        finally:
            probe.close()

    def _deadline(self, requests: list[EvalRequest]) -> float:
        """The batch's seconds, from evaluate's call to its last result: the submission (a full queue
        refusing it, retried) and the tasks' time in the server's queue count."""
        if self.config.batch_timeout_s is not None:
            return self.config.batch_timeout_s
        budget = max(r.options.timeout_s for r in requests)
        rounds = math.ceil(len(requests) / self.capacity)
        return (self.config.deadline_factor * budget + self.config.deadline_grace_s) * rounds

    def evaluate(self, requests: list[EvalRequest]) -> list[EvalResult]:
        if self._closed:
            raise ExecutorError("executor is closed")
        if not requests:
            return []
        from drkernel.executors.http_client import seconds_left

        start = time.monotonic()
        seconds = self._deadline(requests)  # the capacity it may ask for counts too
        try:
            ids = self._client.submit(requests, self.config.priority, seconds_left(start + seconds))
            try:
                results = self._client.wait(ids, seconds_left(start + seconds))
            except EvalTimeout:
                self._client.cancel_all(ids)  # do not leave orphans running on the server
                raise
        except EvalTimeout as exc:
            raise EvalTimeout(f"the batch's deadline of {seconds:g} s (counted from its submission) "
                              f"passed: {exc}") from exc
        return [results[i] for i in ids]

    def cancel(self, task_id: str) -> bool:
        return self._client.cancel(task_id)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._client.close()

    def __enter__(self) -> HttpExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _workers_total(health: dict[str, Any]) -> int:
    """The worker count a server's /health reports (at least 1): the executor's capacity."""
    return max(1, int(health.get("workers", {}).get("total", 1)))
