"""Every command's --help ends with examples (issue 35, part B), lines kept as written, within 80 columns."""

from __future__ import annotations

import pytest

from drkernel.cli import COMMANDS, main
from drkernel.helpfmt import EXAMPLES

SUBCOMMANDS = ["train rl", "train sft", "train recipes", "suite list", "suite show", "suite baselines",
               "suite survey", "suite table"]


def test_every_command_has_examples() -> None:
    assert set(COMMANDS) | set(SUBCOMMANDS) <= set(EXAMPLES)


@pytest.mark.parametrize("path", [*COMMANDS, *SUBCOMMANDS])
def test_help_shows_the_examples(path: str, capsys: pytest.CaptureFixture[str],
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    with pytest.raises(SystemExit) as info:
        main([*path.split(), "--help"])
    assert info.value.code == 0
    text = capsys.readouterr().out
    block = text[text.index("\nexamples:\n") + len("\nexamples:\n"):].splitlines()
    assert block[: len(EXAMPLES[path])] == [f"  {line}" for line in EXAMPLES[path]]
    assert block[0].startswith(f"  drkernel {path} ") or block[0] == f"  drkernel {path}"
    assert all(len(line) <= 80 for line in block)


def _parser_of(path: str):  # type: ignore[no-untyped-def]
    import argparse

    from drkernel.cli import _build_parser

    parser = _build_parser(path.split())
    for word in path.split():
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = sub.choices[word]
    return parser


@pytest.mark.parametrize("path", [*COMMANDS, *SUBCOMMANDS])
def test_every_option_says_what_it_does_and_its_default(path: str) -> None:
    """An option without help text is listed bare, its default never shown (`optimize --temperature`)."""
    parser = _parser_of(path)
    bare = [a.option_strings[0] for a in parser._actions if a.option_strings and not a.help]
    assert not bare, f"{path}: options without help: {bare}"
    formatter = parser._get_formatter()
    for action in parser._actions:
        if action.option_strings and action.default not in (None, False, [], "==SUPPRESS=="):
            assert "default" in formatter._get_help_string(action), (path, action.option_strings)


def test_optimize_help_names_the_sampling_defaults(capsys: pytest.CaptureFixture[str],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    with pytest.raises(SystemExit):
        main(["optimize", "--help"])
    text = capsys.readouterr().out
    assert "sampling temperature (default: 1.0)" in text and "(default: 0.95)" in text
    assert "(default: 3000)" in text and "(default: local)" in text
