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
