"""Problem -> first-turn prompt; feedback text -> later-turn prompt (docs/paper_spec.md §2.2, §2.3).

Packaged templates are plain text files with `{name}` placeholders; only known names are
substituted, so code braces in references and feedback are left alone. Custom templates come from
PromptConfig. A user's later-turn template (`--prompt-template`: a text file, or the authors' prompt
config) is a Python format string, as the authors fill their own: `{feedback}`, `{entry_point}`, and
`{{`/`}}` for literal braces. Under `--protocol paper` the first turn is the problem's own prompt
(the authors' parquet `prompt`) when it carries one.
"""

from __future__ import annotations

import string
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from drkernel.errors import ConfigError
from drkernel.sandbox.static import allowed_imports_text
from drkernel.types import Problem

__all__ = ["PROMPT_TEMPLATE_FIELDS", "PromptConfig", "PromptTemplates", "Message", "data_prompt",
           "first_turn_prompt", "later_turn_prompt", "load_prompt_template"]

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
    # the user's later-turn template (`--prompt-template`): a text file holding it, or the authors' prompt
    # config (.yaml/.yml, its `tool_response` entry); a format string (load_prompt_template). It wins
    # over later_turn_path and the packaged templates.
    template_file: str | None = None
    # the first turn is the problem's own prompt (data_prompt: the authors' parquet `prompt`) when it
    # carries one; our first-turn template otherwise. On under `--protocol paper`.
    first_turn_from_data: bool = False

    def __post_init__(self) -> None:
        if self.protocol not in ("ours", "paper"):
            raise ConfigError("prompts.protocol: must be 'ours' or 'paper'")

    def build(self) -> PromptTemplates:
        later = "paper_later_turn" if self.protocol == "paper" else "later_turn"
        user_later = load_prompt_template(self.template_file) if self.template_file else None
        return PromptTemplates(
            first_turn=_load("first_turn", self.first_turn_path),
            later_turn=user_later or _load("later_turn", self.later_turn_path, resource=later),
            example_reference=_load("example_reference", self.example_reference_path).rstrip(),
            example_solution=_load("example_solution", self.example_solution_path).rstrip(),
            system_prompt=self.system_prompt,
            later_turn_format=user_later is not None,
            first_turn_from_data=self.first_turn_from_data,
        )


@dataclass(frozen=True, slots=True)
class PromptTemplates:
    first_turn: str
    later_turn: str
    example_reference: str
    example_solution: str
    system_prompt: str | None = None
    later_turn_format: bool = False  # later_turn is a format string (a user's --prompt-template)
    first_turn_from_data: bool = False

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


# the fields a --prompt-template may use: the judge's feedback (required) and the entry point's name
PROMPT_TEMPLATE_FIELDS = ("feedback", "entry_point")
_AUTHORS_ENTRY = "tool_response"  # the later-turn entry of the authors' per_turn_prompts


def load_prompt_template(path: str) -> str:
    """The later-turn template of a `--prompt-template` file: the file's text, or from a .yaml/.yml prompt
    config in the authors' layout, the `template` of its `per_turn_prompts` entry named tool_response.

    The template is a Python format string, filled as the authors fill theirs: `{feedback}` (required)
    is the feedback, `{entry_point}` the class name the task asks for ("Model"), `{{` and `}}` are
    literal braces; nothing else may be in braces. A file that breaks this is one ConfigError line."""
    try:
        text = Path(path).read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"--prompt-template {path}: cannot read: {exc}") from None
    if Path(path).suffix.lower() in (".yaml", ".yml"):
        text = _yaml_template(path, text)
    try:
        fields = [(name, spec, conv) for _, name, spec, conv in string.Formatter().parse(text)
                  if name is not None]
    except ValueError as exc:
        raise ConfigError(f"--prompt-template {path}: not a template ({exc}); write {{{{ and }}}} for "
                          "literal braces") from None
    for name, spec, conv in fields:
        if name not in PROMPT_TEMPLATE_FIELDS or spec or conv:
            shown = name + (f"!{conv}" if conv else "") + (f":{spec}" if spec else "")
            raise ConfigError(f"--prompt-template {path}: unknown placeholder {{{shown}}} (the fields are "
                              "{feedback} and {entry_point}; write {{ and }} for literal braces)")
    if "feedback" not in {name for name, _, _ in fields}:
        raise ConfigError(f"--prompt-template {path}: no {{feedback}} placeholder, where the judge's "
                          "feedback goes")
    return text


def _yaml_template(path: str, text: str) -> str:
    """The tool_response template of a prompt config in the authors' layout (per_turn_prompts)."""
    try:
        import yaml
    except ModuleNotFoundError:
        raise ConfigError(f"--prompt-template {path}: reading a YAML config needs PyYAML (pip install "
                          "pyyaml), or put the template alone in a text file") from None
    try:
        data: Any = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"--prompt-template {path}: not YAML: {' '.join(str(exc).split())}") from None
    entries = data.get("per_turn_prompts") if isinstance(data, dict) else None
    if not isinstance(entries, list):  # a number, a mapping: no list of entries
        entries = []
    found = [e for e in entries if isinstance(e, dict) and e.get("name") == _AUTHORS_ENTRY]
    if not found or not isinstance(found[0].get("template"), str):
        raise ConfigError(f"--prompt-template {path}: no per_turn_prompts entry named {_AUTHORS_ENTRY} "
                          "with a template (or give the template alone in a text file)")
    return str(found[0]["template"])


def data_prompt(problem: Problem) -> list[Message] | None:
    """The problem's own first-turn messages (Problem.metadata["prompt"], from the authors' parquet
    `prompt` column: drkernel.problems.loaders.prompt_messages), or None when it has none."""
    messages = problem.metadata.get("prompt")
    if not messages:
        return None
    return [{"role": str(m["role"]), "content": str(m["content"])} for m in messages]


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
    if t.later_turn_format:  # a user's --prompt-template: a format string, checked when it was loaded
        return t.later_turn.format(feedback=feedback.strip(), entry_point=entry_point)
    return _fill(t.later_turn, {"feedback": feedback.strip(), "entry_point": entry_point})
