"""A Policy backed by an OpenAI-compatible chat endpoint (vLLM, SGLang, API providers), via httpx.

POST {base_url}/chat/completions with the sampling parameters and n; token log-probs are asked for
and kept when the server returns them. Concurrency is capped by a semaphore; 429/5xx, timeouts and
connection errors are retried with exponential backoff; every failure ends as PolicyError.
"""

from __future__ import annotations

import contextlib
import logging
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx

from drkernel.agent.policy import Completion, SamplingParams, count_tokens_estimate
from drkernel.errors import ConfigError, PolicyError
from drkernel.wording import counted

__all__ = ["OpenAIPolicy"]

log = logging.getLogger(__name__)

_RETRY_STATUS = {408, 409, 425, 429, 500, 502, 503, 504}
# vLLM / OpenAI wording of a request past the model's context window
_CTX_LIMIT = re.compile(r"maximum context length is (\d+)", re.I)
_CTX_PROMPT = re.compile(r"(\d+) (?:input tokens|in the messages|tokens in the prompt)", re.I)


@contextlib.contextmanager
def _map_httpx_errors() -> Iterator[None]:
    """Translate transport errors into PolicyError at the seam."""
    try:
        yield
    except httpx.TimeoutException as exc:
        raise _Retryable(f"timeout: {exc}") from exc
    except httpx.TransportError as exc:
        raise _Retryable(f"connection error: {exc}") from exc


def _ask(verb: str, key: str) -> str:
    """What to do with `key`: "point --base-url" for a flag (with `verb`), "set rollout.base_url" for
    a setting."""
    return f"{verb} {key}" if key.startswith("-") else f"set {key}"


class _Retryable(PolicyError):
    retry_after: float | None = None


class OpenAIPolicy:
    @dataclass(frozen=True, slots=True, kw_only=True)
    class Config:
        base_url: str = "http://127.0.0.1:8000/v1"
        model: str
        api_key: str | None = None  # sent as a Bearer token
        timeout_s: float = 600.0  # per request; long generations are slow
        max_retries: int = 4
        backoff_s: float = 1.0  # doubled per retry, capped by max_backoff_s
        max_backoff_s: float = 30.0
        max_concurrency: int = 16  # requests in flight at once across threads
        extra_body: dict[str, Any] = field(default_factory=dict)  # e.g. {"top_k": 20}
        tokenizer: str | None = None  # local tokenizer path for exact token counts

        def __post_init__(self) -> None:
            if not self.model:
                raise ConfigError("openai.model: required")
            if self.max_concurrency < 1:
                raise ConfigError("openai.max_concurrency: must be >= 1")
            if self.max_retries < 0:
                raise ConfigError("openai.max_retries: must be >= 0")

        def build(self) -> OpenAIPolicy:
            return OpenAIPolicy(self)

    def __init__(self, config: Config, transport: httpx.BaseTransport | None = None) -> None:
        self.config = config
        headers = {"Authorization": f"Bearer {config.api_key}"} if config.api_key else {}
        self._client = httpx.Client(
            base_url=config.base_url.rstrip("/"),
            headers=headers,
            timeout=httpx.Timeout(config.timeout_s, connect=min(30.0, config.timeout_s)),
            transport=transport,
        )
        self._slots = threading.BoundedSemaphore(config.max_concurrency)
        self._logprobs_supported = True
        self._counter: Callable[[str], int] | None = None

    # -- Policy -------------------------------------------------------------------------------
    def generate(
        self, messages: list[dict[str, str]], n: int = 1, sampling: SamplingParams | None = None
    ) -> list[Completion]:
        sp = sampling or SamplingParams()
        out: list[Completion] = []
        while len(out) < n:  # some providers ignore n: ask again for the rest
            got = self._request(messages, n - len(out), sp)
            if not got:
                raise PolicyError("the server returned no choices")
            out.extend(got)
        return out[:n]

    def count_tokens(self, text: str) -> int:
        if self._counter is None:
            self._counter = self._load_counter()
        return self._counter(text)

    def close(self) -> None:
        self._client.close()

    def check_endpoint(self, timeout_s: float = 10.0, *, url_key: str = "--base-url",
                       model_key: str = "--model",
                       key_hint: str = "set the key's environment variable (--api-key-env)") -> None:
        """GET /models once: a server that is down, refuses the key or does not serve the model is one
        clear ConfigError here, before any judge starts or any retry is spent. The keys are the names
        the user set the URL, the model and the key with (bench's flags, or train rl's settings)."""
        url = f"{self.config.base_url.rstrip('/')}/models"
        point = _ask("point", url_key)
        try:
            response = self._client.get("/models", timeout=timeout_s)
        except httpx.HTTPError as exc:
            raise ConfigError(f"the model server does not answer at {url} ({type(exc).__name__}: {exc}): "
                              f"start it, or {point} at it") from None
        if response.status_code in (401, 403):
            raise ConfigError(f"the model server at {url} refused the API key (HTTP {response.status_code}): "
                              f"{key_hint}")
        try:
            body = response.json()
        except ValueError:  # a web page, a proxy's error: no model server answered
            kind = response.headers.get("content-type", "no content type").split(";")[0]
            raise ConfigError(f"{url} is not an OpenAI-compatible endpoint (HTTP {response.status_code}, "
                              f"{kind}): {point} at one, e.g. http://HOST:PORT/v1") from None
        if response.status_code != 200:  # an API without a model list: the requests will tell
            log.warning("the model server at %s answered HTTP %d to GET /models", url, response.status_code)
            return
        if not isinstance(body, dict) or not isinstance(body.get("data"), list):
            raise ConfigError(f"{url} answered GET /models with no model list: it is not an "
                              f"OpenAI-compatible endpoint; {point} at one, e.g. http://HOST:PORT/v1")
        served = [str(m.get("id")) for m in body["data"] if isinstance(m, dict)]
        if served and self.config.model not in served:
            raise ConfigError(f"the model server at {url} serves {', '.join(served[:5])}, not "
                              f"{self.config.model!r}: {_ask('pass', model_key)} with one of those")

    # -- internals ------------------------------------------------------------------------------
    def _load_counter(self) -> Callable[[str], int]:
        if self.config.tokenizer is None:
            return count_tokens_estimate
        from drkernel.agent.hf_policy import load_tokenizer

        tok = load_tokenizer(self.config.tokenizer)
        return lambda text: len(tok.encode(text, add_special_tokens=False))

    def _body(self, messages: list[dict[str, str]], n: int, sp: SamplingParams) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.config.model,
            "messages": messages,
            "n": n,
            "temperature": sp.temperature,
            "top_p": sp.top_p,
            "max_tokens": sp.max_tokens,
        }
        if sp.stop:
            body["stop"] = list(sp.stop)
        if sp.seed is not None:
            body["seed"] = sp.seed
        if sp.logprobs and self._logprobs_supported:
            body["logprobs"] = True
            body["top_logprobs"] = 0
        body.update(self.config.extra_body)
        return body

    def _request(
        self, messages: list[dict[str, str]], n: int, sp: SamplingParams
    ) -> list[Completion]:
        cfg = self.config
        for attempt in range(cfg.max_retries + 1):
            try:
                with self._slots:
                    return self._post_once(self._body(messages, n, sp))
            except _Retryable as exc:
                if attempt == cfg.max_retries:
                    tries = counted(attempt + 1, "try", "tries")
                    raise PolicyError(f"{cfg.base_url}: gave up after {tries}: {exc}") from exc
                delay = min(cfg.backoff_s * 2**attempt, cfg.max_backoff_s)
                if exc.retry_after is not None:
                    delay = min(max(delay, exc.retry_after), cfg.max_backoff_s)
                log.warning("chat request failed (%s); retry %d in %.1fs", exc, attempt + 1, delay)
                time.sleep(delay)
        raise AssertionError("unreachable")

    def _post_once(self, body: dict[str, Any]) -> list[Completion]:
        with _map_httpx_errors():
            resp = self._client.post("/chat/completions", json=body)
        if resp.status_code == 400 and body.get("logprobs") and "logprob" in resp.text.lower():
            log.warning("the server rejects logprobs; continuing without them")
            self._logprobs_supported = False
            body = {k: v for k, v in body.items() if k not in ("logprobs", "top_logprobs")}
            with _map_httpx_errors():
                resp = self._client.post("/chat/completions", json=body)
        if resp.status_code == 400 and _CTX_LIMIT.search(resp.text):
            return self._overlong(body, resp.text)
        if resp.status_code in _RETRY_STATUS:
            err = _Retryable(f"HTTP {resp.status_code}: {resp.text[:300]}")
            with contextlib.suppress(ValueError):
                err.retry_after = float(resp.headers.get("retry-after", ""))
            raise err
        if resp.status_code != 200:
            raise PolicyError(f"HTTP {resp.status_code} from {self.config.base_url}: {resp.text[:500]}")
        return _parse_completions(resp)

    def _overlong(self, body: dict[str, Any], error: str) -> list[Completion]:
        """Prompt + max_tokens past the model's context: shrink max_tokens to what is left, as
        the authors' budget min(max_model_len - prompt_len, response_length) does; a prompt that
        leaves no room gives empty "prompt_overlong" completions (docs/paper_spec.md §2.7)."""
        limit = _CTX_LIMIT.search(error)
        used = _CTX_PROMPT.search(error)
        room = int(limit.group(1)) - int(used.group(1)) if limit and used else 0
        if room >= 16 and room < int(body.get("max_tokens") or 0):
            log.info("max_tokens %s -> %d to fit the context", body.get("max_tokens"), room)
            with _map_httpx_errors():
                resp = self._client.post("/chat/completions", json={**body, "max_tokens": room})
            if resp.status_code == 200:
                return _parse_completions(resp)
        log.warning("prompt too long for the model's context: empty completion")
        return [Completion(text="", finish_reason="prompt_overlong") for _ in range(int(body.get("n", 1)))]


def _parse_completions(resp: httpx.Response) -> list[Completion]:
    """The choices of a chat completion; a body of another shape (a server's garbage) is a PolicyError."""
    try:
        data = resp.json()
        if not isinstance(data, dict):
            raise TypeError(f"the body is a JSON {type(data).__name__}, not an object")
        usage = data.get("usage") or {}
        if not isinstance(usage, dict):
            raise TypeError(f"usage is {usage!r}, not an object")
        return [_parse_choice(c, usage) for c in data["choices"]]
    except (ValueError, KeyError, TypeError) as exc:
        raise PolicyError(f"malformed chat completion response: {exc}") from exc


def _object(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise TypeError(f"{what} is {str(value)[:80]!r}, not an object")
    return value


def _parse_choice(choice: Any, usage: dict[str, Any]) -> Completion:
    choice = _object(choice, "a choice")
    message = _object(choice.get("message") or {}, "a choice's message")
    text = message.get("content") or ""
    if not isinstance(text, str):
        raise TypeError(f"a message's content is {str(text)[:80]!r}, not text")
    tokens = logprobs = None
    content_lp = _object(choice.get("logprobs") or {}, "a choice's logprobs").get("content")
    if content_lp:
        entries = [_object(x, "a token's logprob") for x in content_lp]
        tokens = [str(x.get("token", "")) for x in entries]
        logprobs = [float(x["logprob"]) for x in entries]
    return Completion(
        text=text,
        finish_reason=choice.get("finish_reason"),
        tokens=tokens,
        logprobs=logprobs,
        reasoning=message.get("reasoning_content") or message.get("reasoning"),
        prompt_tokens=usage.get("prompt_tokens"),
        completion_tokens=usage.get("completion_tokens"),
    )
