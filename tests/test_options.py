"""The device is the judge's, not the request's (issue 19): EvalOptions has no device, an old client's
"device" key is accepted and ignored, and every other unknown key is still refused."""

from __future__ import annotations

import dataclasses
import inspect
import re

import pytest

import drkernel
from drkernel.errors import ConfigError
from drkernel.types import EvalOptions, EvalRequest


def test_options_carry_no_device() -> None:
    assert "device" not in {f.name for f in dataclasses.fields(EvalOptions)}
    with pytest.raises(TypeError):
        EvalOptions(device="cuda")  # type: ignore[call-arg]


def test_an_old_clients_device_key_is_accepted_and_ignored() -> None:
    opts = EvalOptions.from_dict({"device": "cuda:3", "timeout_s": 5.0})
    assert opts == EvalOptions(timeout_s=5.0) and "device" not in opts.to_dict()
    request = EvalRequest.from_dict({"reference_code": "x", "kernel_code": "y",
                                     "options": {"device": "cpu", "num_warmup": 1}})
    assert request.options == EvalOptions(num_warmup=1)


def test_other_unknown_keys_are_still_refused() -> None:
    with pytest.raises(ConfigError, match="devices"):
        EvalOptions.from_dict({"devices": "cuda"})


def test_the_one_call_api_takes_the_device_beside_the_options() -> None:
    params = inspect.signature(drkernel.evaluate).parameters
    assert params["device"].kind is inspect.Parameter.KEYWORD_ONLY and params["device"].default is None


@pytest.mark.parametrize(("args", "options", "words"), [
    ((None, "class ModelNew: pass"), None, "reference_code and kernel_code must be text"),
    ((b"class Model: pass", "class ModelNew: pass"), None, "must be text"),
    (("class Model: pass", "class ModelNew: pass"), "paper", "options: expected drkernel.EvalOptions"),
    (("class Model: pass", "class ModelNew: pass"), EvalOptions(num_correct_trials=0), "num_correct_trials"),
])
def test_the_one_call_api_refuses_a_bad_request_before_a_judge_starts(monkeypatch, args, options, words):
    """drkernel.evaluate started a judge (its sandbox processes, seconds) and only then refused the request;
    options that were no EvalOptions ("paper") were an AttributeError from inside the judge. Each is now a
    ConfigError naming what is wrong, and no judge starts."""
    from drkernel.sandbox.judge import Judge

    def no_judge(*a, **k):
        raise AssertionError("a judge was started for a request it must refuse")

    monkeypatch.setattr(Judge, "from_config", no_judge)
    with pytest.raises(ConfigError, match=words):
        drkernel.evaluate(*args, options)


@pytest.mark.parametrize(("given", "words"), [
    ({"num_correct_trials": "5"}, "num_correct_trials: '5' is not an integer"),
    ({"num_warmup": None}, "num_warmup: None is not an integer"),
    ({"timeout_s": "10"}, "timeout_s: '10' is not a number"),
    ({"atol": "x"}, "atol: 'x' is not a number or null"),
    ({"seed": 1.5}, "seed: 1.5 is not an integer or null"),
    ({"profile": "no"}, "profile: 'no' is not true or false"),
    ({"memory_limit_mb": True}, "memory_limit_mb: True is not an integer"),
])
def test_an_option_of_another_type_is_refused_by_name(given, words) -> None:
    """EvalOptions took any value: "5" trials or a None warm-up failed in the judge's checks as a TypeError
    (a 500 from the server, a traceback from drkernel.evaluate), profile "no" read as true and seed 1.5
    reached the sandbox's generators. Each is a ConfigError naming the field."""
    with pytest.raises(ConfigError, match=f"^{re.escape(words)}$"):
        EvalOptions.from_dict(given)
    with pytest.raises(ConfigError, match=re.escape(words)):
        EvalOptions(**given)


def test_every_option_of_its_type_is_taken() -> None:
    options = EvalOptions(num_perf_trials=3, timeout_s=10, atol=1, seed=7, launch_preroll_us=0)
    assert EvalOptions.from_dict(options.to_dict()) == options
    assert EvalOptions.from_dict(EvalOptions.paper().to_dict()) == EvalOptions.paper()


def test_a_leading_byte_order_mark_is_dropped_from_both_sources() -> None:
    """A source read with "utf-8" from a file an editor saved with a BOM starts with U+FEFF, which
    compile() refuses in a string: through the API the kernel was a compile_error, where the CLI (which
    reads "utf-8-sig") judged it. Every path builds an EvalRequest, which now drops the mark."""
    source = "class ModelNew:\n    pass\n"
    with pytest.raises(SyntaxError):
        compile("\ufeff" + source, "kernel.py", "exec")
    request = EvalRequest.from_dict({"reference_code": "\ufeffx = 1\n", "kernel_code": "\ufeff" + source})
    assert request.reference_code == "x = 1\n" and request.kernel_code == source
    compile(request.kernel_code, "kernel.py", "exec")
    assert EvalRequest(reference_code="a\ufeff", kernel_code="").reference_code == "a\ufeff"  # only the first
