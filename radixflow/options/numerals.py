"""A number as a user types it as text (a flag's value, a TOML float): Python's own grammar
(``int``, ``float``: a sign, underscores between digits, spaces around), in ASCII only.

Python reads the digits of every script: ``int("١٢")`` is 12 and ``float("１.５")`` 1.5. A flag
took them, where every other door (a JSON body, a TOML cell, ``LLM(...)``) has numbers in ASCII
digits only and refuses such text as a string; a flag now refuses it in those words.

A float no float holds (``1e400`` reads as inf) keeps its text (`Written`), so a refusal quotes
what the user wrote, not ``inf``; so does an option flag's every float (`typed_float`). Pure.
"""

from __future__ import annotations

import math
import re
import sys

from radixflow.problems import SHOWN_CHARS  # where a value quoted back is cut


class Written(float):
    """A float read from text, which repr gives back as written (cut where long): ``1e400``, not
    ``inf``; a flag's ``-1``, not ``-1.0``. The checks refuse every non-finite number, and an
    options dataclass holds a finite one as the plain float it is (`spec.numbers_as_held`), so
    none is ever kept."""

    text: str

    def __new__(cls, value: float, text: str) -> Written:
        made = super().__new__(cls, value)
        made.text = text.strip()
        return made

    def __repr__(self) -> str:
        return typed(self.text)

    def __getnewargs__(self) -> tuple[float, str]:  # a copy or a pickle keeps the text
        return float(self), self.text


def typed(text: str) -> str:
    """``text`` as a refusal quotes it back bare (``got 1e400``), cut where it is long."""
    text = text.strip()
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 3] + "..."


def written_float(text: str) -> float:
    """``float(text)``, a non-finite one as `Written` (tomllib's ``parse_float``: TOML's own
    grammar has been checked). Raises ValueError as ``float`` does."""
    value = float(text)
    return value if math.isfinite(value) else Written(value, text)


def read_int(text: str) -> int | None:
    """``text`` as an integer; None where it is none (in ASCII). One past the 4300 digits Python's
    ``int`` reads is read too, for the check to say how far out of range it is (LLM(...) given
    such an integer does), not that it is no integer."""
    if not text.isascii():
        return None
    try:
        return int(text)
    except ValueError:
        return _long_int(text)


def max_digits() -> int:
    """The most digits Python spells an integer in (``str`` raises past them; 0: no limit)."""
    return sys.get_int_max_str_digits()


def spelled(value: int) -> bool:
    """Whether Python spells ``value`` (`max_digits`)."""
    return max_digits() == 0 or abs(value) < 10 ** max_digits()


_INTEGER = re.compile(r"\s*([+-]?)([0-9]+(?:_[0-9]+)*)\s*")  # int()'s grammar in base 10
CHUNK = 4000  # digits int() reads at once, within sys.get_int_max_str_digits()'s default 4300


def _long_int(text: str) -> int | None:
    match = _INTEGER.fullmatch(text)
    if match is None:
        return None
    digits, value = match.group(2).replace("_", ""), 0
    for start in range(0, len(digits), CHUNK):
        chunk = digits[start : start + CHUNK]
        value = value * 10 ** len(chunk) + int(chunk)
    return -value if match.group(1) == "-" else value


def typed_float(text: str) -> float | None:
    """``text`` as a float (`read_float`) that a refusal quotes as typed, finite or not: an option
    flag's value (`Written`); None where it is no number."""
    value = read_float(text)
    if value is None or isinstance(value, Written):  # a non-finite one is already as typed
        return value
    return Written(value, text)


def read_float(text: str) -> float | None:
    """``text`` as a float (nan and inf too: the checks refuse them); None where it is no number
    (in ASCII)."""
    if not text.isascii():
        return None
    try:
        return written_float(text)
    except ValueError:
        return None
