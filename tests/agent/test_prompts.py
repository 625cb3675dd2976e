import pytest

from drkernel.agent.prompts import PromptConfig, first_turn_prompt, later_turn_prompt
from drkernel.errors import ConfigError
from drkernel.types import Problem


def test_first_turn_has_example_reference_and_instructions():
    ref = "class Model:\n    def f(self): return {'a': 1}\n"
    text = first_turn_prompt(Problem(name="p", reference_code=ref))
    assert "@triton.jit" in text and "def add_kernel" in text  # the one-shot example
    assert "{'a': 1}" in text  # braces in the reference are left alone
    assert "ModelNew" in text and "step by step" in text
    assert "{reference_code}" not in text and "{entry_point}" not in text
    assert text.index("add_kernel") < text.index("{'a': 1}")  # example before the task


def test_entry_point_is_substituted():
    text = first_turn_prompt(Problem(name="p", reference_code="x", entry_point="Net"))
    assert "NetNew" in text


def test_later_turn_carries_feedback_verbatim():
    fb = "error: {weird} ${x} {feedback}"
    text = later_turn_prompt(fb)
    assert fb in text and "ModelNew" in text
    assert text.count("{feedback}") == 1  # the value is not re-scanned for placeholders


def test_custom_templates(tmp_path):
    first = tmp_path / "first.txt"
    first.write_text("Optimize:\n{reference_code}\nas {entry_point}New")
    cfg = PromptConfig(first_turn_path=str(first), system_prompt="be brief")
    t = cfg.build()
    assert first_turn_prompt(Problem(name="p", reference_code="REF"), t) == "Optimize:\nREF\nas ModelNew"
    assert t.system_prompt == "be brief"


def test_template_without_placeholder_is_rejected(tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_text("no placeholder here")
    with pytest.raises(ConfigError, match="reference_code"):
        PromptConfig(first_turn_path=str(bad)).build()
    with pytest.raises(ConfigError, match="cannot read"):
        PromptConfig(later_turn_path=str(tmp_path / "missing.txt")).build()


def test_first_turn_states_the_import_rule_of_the_static_gate():
    """A model learns the rule from its prompt, not from a zero reward (issue 18)."""
    from drkernel.sandbox.static import ALLOWED_IMPORT_ROOTS, check_source

    text = first_turn_prompt(Problem(name="p", reference_code="x"))
    line = next(s for s in text.split(". ") if s.startswith("Import only these modules"))
    listed = {m.strip() for m in line.split(":", 1)[1].split(";")[0].split(",")}
    assert listed == ALLOWED_IMPORT_ROOTS - {"__future__"}
    assert "{allowed_imports}" not in text
    # every module the prompt allows passes the gate
    source = "".join(f"import {m}\n" for m in sorted(listed)) + "class ModelNew:\n    pass\n"
    assert check_source(source).hacks == {}
