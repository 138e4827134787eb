"""A number as a user types it as text (a flag's value): Python's own grammar (``int``, ``float``:
a sign, underscores between digits, spaces around), in ASCII only.

Python reads the digits of every script: ``int("١٢")`` is 12 and ``float("１.５")`` 1.5. A flag
took them, where every other door (a JSON body, a TOML cell, ``LLM(...)``) has numbers in ASCII
digits only and refuses such text as a string; a flag now refuses it in those words. Pure.
"""

from __future__ import annotations


def read_int(text: str) -> int | None:
    """``text`` as an integer; None where it is none (in ASCII)."""
    if not text.isascii():
        return None
    try:
        return int(text)
    except ValueError:
        return None


def read_float(text: str) -> float | None:
    """``text`` as a float (nan and inf too: the checks refuse them); None where it is no number
    (in ASCII)."""
    if not text.isascii():
        return None
    try:
        return float(text)
    except ValueError:
        return None
