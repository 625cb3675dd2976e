import importlib

import pytest

import drkernel.agent as agent

MODULES = [
    "env", "extraction", "feedback", "loop", "metrics", "policy", "prompts", "report",
    "trajectories", "tts", "openai_policy", "hf_policy", "cli_bench", "cli_optimize",
    "cli_options",
]


def test_package_exports_resolve():
    assert sorted(agent.__all__) == sorted(set(agent.__all__))
    for name in agent.__all__:
        assert getattr(agent, name) is not None, name


@pytest.mark.parametrize("name", MODULES)
def test_module_all_names_exist(name):
    mod = importlib.import_module(f"drkernel.agent.{name}")
    assert mod.__doc__ and len(mod.__doc__.strip().splitlines()) >= 3
    for item in mod.__all__:
        assert hasattr(mod, item), f"{name}.{item}"


@pytest.mark.parametrize("name", ["extraction", "metrics", "policy", "tts"])
def test_doctests(name):
    import doctest

    mod = importlib.import_module(f"drkernel.agent.{name}")
    result = doctest.testmod(mod)
    assert result.attempted > 0 and result.failed == 0
