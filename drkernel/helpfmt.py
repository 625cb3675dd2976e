"""Help formatting: each option's default, where it has one worth showing, and examples under each
command's help (`add_examples`, called by drkernel.cli for the command it builds)."""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["EXAMPLES", "DefaultsHelpFormatter", "add_examples"]


class DefaultsHelpFormatter(argparse.HelpFormatter):
    """Like argparse.ArgumentDefaultsHelpFormatter, without '(default: None)' or '(default: False)' and
    without repeating a default the help text already states."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if (
            "default" in text
            or default is None
            or default is False
            or default == []
            or default is argparse.SUPPRESS
            or not action.option_strings
        ):
            return text
        return f"{text} (default: %(default)s)"


# command path -> example command lines, shown under "examples:" at the end of its --help
EXAMPLES: dict[str, tuple[str, ...]] = {
    "eval": ("drkernel eval drkernel/examples/relu_scale/reference.py \\",
             "    drkernel/examples/relu_scale/kernel.py",
             "drkernel eval ref.py kernel.py --json --device cuda:1",
             "drkernel eval ref.py - --json < answer.py     # the kernel from stdin"),
    "serve": ("drkernel serve                          # 127.0.0.1:8000, judges on every GPU",
              "drkernel serve --executor ray --address auto"),
    "bench": ("drkernel bench builtin:cpu --model M --samples 2 --out runs/cpu  # no GPU here",
              "drkernel bench builtin:gpu --model M --base-url http://HOST/v1 --out runs/m",
              "drkernel bench builtin:gpu --model M --out runs/m --resume   # continue runs/m"),
    "optimize": ("drkernel optimize my_module.py --model M --base-url http://127.0.0.1:8001/v1",
                 "drkernel optimize my_module.py --model M --tts --held-out"),
    "report": ("drkernel report runs/m",
               "drkernel report runs/m --allow-partial   # exit 0 on an interrupted run too"),
    "audit": ("drkernel audit builtin", "drkernel audit path/to/KernelBench --levels 1,2 --judge"),
    "suite": ("drkernel suite list", "drkernel suite show 101_ReLU --solution"),
    "suite list": ("drkernel suite list --json",),
    "suite show": ("drkernel suite show 101_ReLU --size cpu",),
    "suite baselines": ("drkernel suite baselines builtin:gpu --device cuda --backend both",),
    "suite survey": ("drkernel suite survey kernelbench:.kb --levels 1-3 --device cuda \\",
                     "    --out survey.json --resume --budget-s 540",),
    "suite table": ("drkernel suite table survey.json --markdown --out table.md",),
    "train": ("drkernel train recipes", "drkernel train rl --recipe debug_cpu --run-dir runs/debug"),
    "train rl": ("drkernel train rl --recipe debug_cpu --run-dir runs/dbg   # rerun: resumes",
                 "drkernel train rl --recipe debug_cpu --run-dir runs/dbg --set trainer.steps=6"),
    "train sft": ("drkernel train sft --recipe dr_kernel_8b --model Qwen/Qwen3-8B-Base \\",
                  "    --data coldstart.jsonl --out sft8b"),
    "train recipes": ("drkernel train recipes dr_kernel_8b", "drkernel train recipes --keys"),
}
_HEADER = "examples:\n"


def add_examples(parser: argparse.ArgumentParser, path: str) -> None:
    """Append the EXAMPLES of `path` (and of its subcommands, to theirs) to the parsers' epilogs."""
    lines = EXAMPLES.get(path)
    if lines:
        block = _HEADER + "\n".join(f"  {line}" for line in lines)
        parser.epilog = f"{parser.epilog}\n\n{block}" if parser.epilog else block
        parser.formatter_class = _keeping_examples(parser.formatter_class)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                add_examples(child, f"{path} {name}")


def _keeping_examples(base: Any) -> Any:
    """`base`, except that an epilog's examples block keeps its lines as written."""

    class KeepingExamples(base):  # type: ignore[misc, valid-type]
        def _fill_text(self, text: str, width: int, indent: str) -> str:
            head, sep, block = text.partition(_HEADER)
            filled = str(super()._fill_text(head, width, indent)) if head.strip() else ""
            if not sep:
                return filled
            return (f"{filled}\n\n" if filled else "") + indent + _HEADER + block

    return KeepingExamples
