"""Problem -> first-turn prompt; feedback text -> later-turn prompt (docs/paper_spec.md §2.2, §2.3).

Templates are plain text files with `{name}` placeholders; only known names are substituted, so
code braces in references and feedback are left alone. Custom templates come from PromptConfig.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from drkernel.errors import ConfigError
from drkernel.sandbox.static import allowed_imports_text
from drkernel.types import Problem

__all__ = ["PromptConfig", "PromptTemplates", "Message", "first_turn_prompt", "later_turn_prompt"]

Message = dict[str, str]  # {"role": "user" | "assistant" | "system", "content": ...}

_FIELDS = {
    "first_turn": ("reference_code", "entry_point", "example_reference", "example_solution",
                   "allowed_imports"),
    "later_turn": ("feedback", "entry_point"),
}


@dataclass(frozen=True, slots=True, kw_only=True)
class PromptConfig:
    """Where the templates come from. None: the packaged template of that name."""

    first_turn_path: str | None = None
    later_turn_path: str | None = None
    example_reference_path: str | None = None
    example_solution_path: str | None = None
    system_prompt: str | None = None  # the paper uses none (docs/paper_spec.md §2.2)
    # "paper": the packaged later-turn template follows the authors' (docs/paper_spec.md §2.3), for the
    # raw JSON feedback of `--protocol paper`; "ours": the default one
    protocol: str = "ours"

    def __post_init__(self) -> None:
        if self.protocol not in ("ours", "paper"):
            raise ConfigError("prompts.protocol: must be 'ours' or 'paper'")

    def build(self) -> PromptTemplates:
        later = "paper_later_turn" if self.protocol == "paper" else "later_turn"
        return PromptTemplates(
            first_turn=_load("first_turn", self.first_turn_path),
            later_turn=_load("later_turn", self.later_turn_path, resource=later),
            example_reference=_load("example_reference", self.example_reference_path).rstrip(),
            example_solution=_load("example_solution", self.example_solution_path).rstrip(),
            system_prompt=self.system_prompt,
        )


@dataclass(frozen=True, slots=True)
class PromptTemplates:
    first_turn: str
    later_turn: str
    example_reference: str
    example_solution: str
    system_prompt: str | None = None

    @classmethod
    def default(cls) -> PromptTemplates:
        return PromptConfig().build()


def _load(name: str, path: str | None, resource: str | None = None) -> str:
    if path is not None:
        try:
            text = Path(path).read_text()
        except OSError as exc:
            raise ConfigError(f"prompt template {name}: cannot read {path}: {exc}") from exc
    else:
        text = resources.files("drkernel.agent").joinpath(f"templates/{resource or name}.txt").read_text()
    if name in _FIELDS and "{" + _FIELDS[name][0] + "}" not in text:
        raise ConfigError(f"prompt template {name}: missing the {{{_FIELDS[name][0]}}} placeholder")
    return text


def _fill(template: str, values: dict[str, str]) -> str:
    """Substitute `{name}` for the given names only, in one pass (values are never re-scanned)."""
    out: list[str] = []
    i = 0
    while i < len(template):
        j = template.find("{", i)
        if j < 0:
            out.append(template[i:])
            break
        k = template.find("}", j)
        name = template[j + 1 : k] if k > 0 else ""
        if name in values:
            out.append(template[i:j])
            out.append(values[name])
            i = k + 1
        else:
            out.append(template[i : j + 1])
            i = j + 1
    return "".join(out)


def first_turn_prompt(problem: Problem, templates: PromptTemplates | None = None) -> str:
    """The task message: role, freedom, one-shot Triton add example, the reference, instructions."""
    t = templates or PromptTemplates.default()
    return _fill(
        t.first_turn,
        {
            "reference_code": problem.reference_code.strip(),
            "entry_point": problem.entry_point,
            "example_reference": t.example_reference,
            "example_solution": t.example_solution,
            "allowed_imports": allowed_imports_text(),  # the static gate's own list: they cannot drift
        },
    )


def later_turn_prompt(
    feedback: str, entry_point: str = "Model", templates: PromptTemplates | None = None
) -> str:
    """The user message after a judged turn, carrying the judge's feedback."""
    t = templates or PromptTemplates.default()
    return _fill(t.later_turn, {"feedback": feedback.strip(), "entry_point": entry_point})
