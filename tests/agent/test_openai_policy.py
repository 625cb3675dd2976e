import json
import threading
import time

import httpx
import pytest

from drkernel.agent.openai_policy import OpenAIPolicy
from drkernel.agent.policy import SamplingParams, token_counter
from drkernel.errors import ConfigError, PolicyError

MSGS = [{"role": "user", "content": "hi"}]


def reply(n, logprobs=True, text="ok"):
    choices = []
    for i in range(n):
        c = {"index": i, "message": {"role": "assistant", "content": f"{text}{i}"}, "finish_reason": "stop"}
        if logprobs:
            c["logprobs"] = {"content": [{"token": "ok", "logprob": -0.25, "top_logprobs": []},
                                         {"token": str(i), "logprob": -1.5, "top_logprobs": []}]}
        choices.append(c)
    return {"choices": choices, "usage": {"prompt_tokens": 3, "completion_tokens": 2}}


def policy(handler, **kw):
    cfg = OpenAIPolicy.Config(base_url="http://test/v1", model="m", backoff_s=0.0, **kw)
    return OpenAIPolicy(cfg, transport=httpx.MockTransport(handler))


def test_request_body_and_parsing():
    seen = []

    def handler(req):
        seen.append((req.url.path, req.headers.get("authorization"), json.loads(req.content)))
        return httpx.Response(200, json=reply(2))

    p = policy(handler, api_key="sk-test", extra_body={"top_k": 20})
    sp = SamplingParams(temperature=0.7, top_p=0.9, max_tokens=123, stop=("</s>",), seed=5)
    out = p.generate(MSGS, n=2, sampling=sp)
    path, auth, body = seen[0]
    assert path == "/v1/chat/completions" and auth == "Bearer sk-test"
    assert body["n"] == 2 and body["temperature"] == 0.7 and body["top_p"] == 0.9
    assert body["max_tokens"] == 123 and body["stop"] == ["</s>"] and body["seed"] == 5
    assert body["logprobs"] is True and body["top_k"] == 20 and body["messages"] == MSGS
    assert [c.text for c in out] == ["ok0", "ok1"]
    assert out[1].logprobs == [-0.25, -1.5] and out[1].tokens == ["ok", "1"]
    assert out[0].finish_reason == "stop" and out[0].completion_tokens == 2


def test_provider_ignoring_n_is_asked_again():
    calls = []

    def handler(req):
        calls.append(json.loads(req.content)["n"])
        return httpx.Response(200, json=reply(1, logprobs=False))

    out = policy(handler).generate(MSGS, n=3)
    assert len(out) == 3 and calls == [3, 2, 1] and out[0].logprobs is None


def test_retries_on_429_and_5xx_then_succeeds():
    codes = iter([429, 503, 200])

    def handler(req):
        code = next(codes)
        return httpx.Response(code, json=reply(1) if code == 200 else {"error": "busy"})

    assert policy(handler, max_retries=3).generate(MSGS)[0].text == "ok0"


def test_gives_up_after_max_retries():
    n = {"calls": 0}

    def handler(req):
        n["calls"] += 1
        raise httpx.ConnectError("refused")

    with pytest.raises(PolicyError, match="gave up after 3 tries"):
        policy(handler, max_retries=2).generate(MSGS)
    assert n["calls"] == 3
    with pytest.raises(PolicyError, match="gave up after 1 try: "):  # it said "1 tries"
        policy(handler, max_retries=0).generate(MSGS)


def test_client_errors_are_not_retried():
    n = {"calls": 0}

    def handler(req):
        n["calls"] += 1
        return httpx.Response(401, json={"error": "bad key"})

    with pytest.raises(PolicyError, match="HTTP 401"):
        policy(handler).generate(MSGS)
    assert n["calls"] == 1


def test_malformed_response():
    with pytest.raises(PolicyError, match="malformed"):
        policy(lambda req: httpx.Response(200, json={"nope": 1})).generate(MSGS)


def test_server_without_logprobs_support():
    bodies = []

    def handler(req):
        body = json.loads(req.content)
        bodies.append(body)
        if body.get("logprobs"):
            return httpx.Response(400, json={"error": "logprobs is not supported"})
        return httpx.Response(200, json=reply(1, logprobs=False))

    p = policy(handler)
    assert p.generate(MSGS)[0].text == "ok0"
    p.generate(MSGS)
    assert "logprobs" not in bodies[-1] and len(bodies) == 3  # remembered after the first refusal


def test_concurrency_limit():
    active, peak, lock = [0], [0], threading.Lock()

    def handler(req):
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        time.sleep(0.05)
        with lock:
            active[0] -= 1
        return httpx.Response(200, json=reply(1))

    p = policy(handler, max_concurrency=2)
    threads = [threading.Thread(target=p.generate, args=(MSGS,)) for _ in range(6)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert peak[0] == 2


def test_timeout_is_retried_then_reported():
    def handler(req):
        raise httpx.ReadTimeout("slow")

    with pytest.raises(PolicyError, match="timeout"):
        policy(handler, max_retries=1).generate(MSGS)


def test_token_counter_falls_back_to_estimate():
    p = policy(lambda req: httpx.Response(200, json=reply(1)))
    assert token_counter(p)("abcdefgh") == 2


def test_config_validation():
    with pytest.raises(ConfigError):
        OpenAIPolicy.Config(model="")
    with pytest.raises(ConfigError):
        OpenAIPolicy.Config(model="m", max_concurrency=0)


def test_context_overflow_shrinks_max_tokens_or_gives_an_empty_turn():
    bodies = []

    def handler(req):
        body = json.loads(req.content)
        bodies.append(body)
        prompt = len(body["messages"][0]["content"])
        if prompt + body["max_tokens"] > 1000:
            msg = (f"This model's maximum context length is 1000 tokens. However, you requested "
                   f"{prompt + body['max_tokens']} tokens ({prompt} in the messages, "
                   f"{body['max_tokens']} in the completion).")
            return httpx.Response(400, json={"error": {"message": msg}})
        return httpx.Response(200, json=reply(1))

    p = policy(handler)
    out = p.generate([{"role": "user", "content": "x" * 900}], sampling=SamplingParams(max_tokens=500))
    assert out[0].text == "ok0" and bodies[-1]["max_tokens"] == 100
    out = p.generate([{"role": "user", "content": "x" * 995}], n=2, sampling=SamplingParams(max_tokens=500))
    assert [c.finish_reason for c in out] == ["prompt_overlong"] * 2 and out[0].text == ""


@pytest.mark.parametrize("payload", [
    {"choices": ["hello"]},  # a choice that is no object
    {"choices": [{"message": "hi"}]},  # a message that is no object
    {"choices": [{"message": {"content": 42}}]},  # content that is no text
    {"choices": [{"message": {"content": "x"}, "logprobs": "none"}]},
    {"choices": [{"message": {"content": "x"}, "logprobs": {"content": ["a"]}}]},
    {"choices": [{"message": {"content": "x"}}], "usage": "lots"},
    ["a list"],
])
def test_a_garbled_completion_is_a_policy_error(payload):
    with pytest.raises(PolicyError, match="malformed chat completion response"):
        policy(lambda req: httpx.Response(200, json=payload)).generate(MSGS)


def test_a_garbled_answer_to_the_shrunk_request_is_a_policy_error():
    def handler(req):
        if json.loads(req.content)["max_tokens"] == 500:
            msg = ("This model's maximum context length is 1000 tokens. However, you requested 1400 "
                   "tokens (900 in the messages, 500 in the completion).")
            return httpx.Response(400, json={"error": {"message": msg}})
        return httpx.Response(200, json={"choices": [{"message": "hi"}]})

    with pytest.raises(PolicyError, match="malformed chat completion response"):
        policy(handler).generate(MSGS, sampling=SamplingParams(max_tokens=500))
