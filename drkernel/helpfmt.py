"""A help formatter that shows each option's default, where it has one worth showing."""

from __future__ import annotations

import argparse

__all__ = ["DefaultsHelpFormatter"]


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
