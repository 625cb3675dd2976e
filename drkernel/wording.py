"""Wording shared by the commands' messages: a count with its noun, singular for one."""

from __future__ import annotations

__all__ = ["counted"]


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """`n` and `noun`, in the plural (`plural`, else noun + "s") unless n is 1.

    >>> counted(1, "problem"), counted(3, "problem"), counted(2, "try", "tries")
    ('1 problem', '3 problems', '2 tries')
    """
    return f"{n} {noun if n == 1 else plural or noun + 's'}"
