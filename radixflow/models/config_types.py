"""The value types a model family's config fields take (`Int`, `Float`, `Bool`, `Str`, `ListOf`,
`AnyOf`), each saying why a value is not one as `Problem`s, and how a config value is spelt back
(`show`) and read as a number (`as_number`). Types are strict: an integer field given ``4.5``,
``32.0``, ``"32"`` or ``true`` is a problem, never a cast. `config_schema` declares fields of them.

Pure Python (no torch).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Protocol

from radixflow.problems import Problem

# transformers writes non-finite floats as {"__float__": "Infinity"} (PreTrainedConfig.to_json_string)
_FLOAT_TAGS = {"Infinity": math.inf, "-Infinity": -math.inf, "NaN": math.nan}


def show(value: object, limit: int = 60) -> str:
    """A config value as JSON spells it (``"1e-6"``, ``true``, ``4.5``), cut to ``limit`` characters."""
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def as_number(value: object) -> float | int | None:
    """An int or float from config.json (transformers' tagged form included); None for anything else."""
    if isinstance(value, dict) and set(value) == {"__float__"}:
        return _FLOAT_TAGS.get(value["__float__"])  # type: ignore[arg-type]
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return value


class FieldType(Protocol):
    def problems(self, value: object) -> list[Problem]:
        """Why ``value`` is not of this type (param: a key inside it, or None), or []. Pure."""
        ...

    def describe(self) -> str:
        """The type in words, e.g. "a positive integer"."""
        ...


def _range(low: float | None, high: float | None, above: float | None) -> str:
    """The bounds in words: ">= 2", "> 0 and <= 1", "" (none)."""
    parts = [f">= {low:g}" if low is not None else "", f"> {above:g}" if above is not None else ""]
    parts.append(f"<= {high:g}" if high is not None else "")
    return " and ".join(p for p in parts if p)


@dataclass(frozen=True)
class Int:
    low: int | None = None
    high: int | None = None

    def describe(self) -> str:
        if self.low == 1:
            return "a positive integer" + (f" <= {self.high}" if self.high is not None else "")
        return f"an integer {_range(self.low, self.high, None)}".rstrip()

    def problems(self, value: object) -> list[Problem]:
        if isinstance(value, bool) or not isinstance(value, int):
            return [Problem(None, f"must be an integer, got {show(value)}")]
        if (self.low is not None and value < self.low) or (self.high is not None and value > self.high):
            return [Problem(None, f"must be {self.describe()}, got {value}")]
        return []


@dataclass(frozen=True)
class Float:
    """A number (an integer is a number too); ``finite=False`` admits infinity (a limit that never
    binds), never NaN."""

    low: float | None = None
    high: float | None = None
    above: float | None = None  # exclusive lower bound
    finite: bool = True

    def describe(self) -> str:
        kind = "a finite number" if self.finite else "a number"
        if self.above == 0 and self.low is None and self.high is None:
            return f"a positive {kind[2:]}"
        return f"{kind} {_range(self.low, self.high, self.above)}".rstrip()

    def problems(self, value: object) -> list[Problem]:
        number = as_number(value)
        if isinstance(number, int) and not _fits_float(number):  # the code reads it as a float
            return [Problem(None, f"must be {self.describe()}, got {show(value)} (beyond a float's range)")]
        if number is None or math.isnan(number) or (self.finite and math.isinf(number)):
            return [Problem(None, f"must be {self.describe()}, got {show(value)}")]
        low_ok = (self.low is None or number >= self.low) and (self.above is None or number > self.above)
        if not low_ok or (self.high is not None and number > self.high):
            return [Problem(None, f"must be {self.describe()}, got {show(value)}")]
        return []


def _fits_float(number: int) -> bool:
    """Whether ``number`` (JSON reads a long integer literal exactly) converts to a float."""
    try:
        float(number)
    except OverflowError:
        return False
    return True


@dataclass(frozen=True)
class Bool:
    only: bool | None = None  # the one value the family supports
    why: str = ""  # why the other is not, e.g. "sliding-window attention is not supported"

    def describe(self) -> str:
        return "true or false" if self.only is None else show(self.only)

    def problems(self, value: object) -> list[Problem]:
        if not isinstance(value, bool) or (self.only is not None and value is not self.only):
            why = f" ({self.why})" if self.why else ""
            return [Problem(None, f"must be {self.describe()}{why}, got {show(value)}")]
        return []


@dataclass(frozen=True)
class Str:
    """A string; ``choices``: the values allowed, ``alphabet``: the characters allowed (a pattern)."""

    choices: tuple[str, ...] | None = None
    alphabet: str | None = None
    min_length: int = 0

    def describe(self) -> str:
        if self.choices is not None:
            return "one of " + ", ".join(map(show, self.choices))
        if self.alphabet is not None:
            return f"a string of the characters {self.alphabet}"
        return "a string"

    def problems(self, value: object) -> list[Problem]:
        if not isinstance(value, str) or (self.choices is not None and value not in self.choices):
            return [Problem(None, f"must be {self.describe()}, got {show(value)}")]
        if self.alphabet is not None and (bad := [c for c in value if c not in self.alphabet]):
            return [Problem(None, f"character {bad[0]!r} is not one of {self.alphabet}")]
        if len(value) < self.min_length:
            return [Problem(None, f"must have at least {self.min_length} character(s), got {show(value)}")]
        return []


@dataclass(frozen=True)
class ListOf:
    item: FieldType
    length: int | None = None  # exactly this many entries
    min_length: int = 0

    def describe(self) -> str:
        return f"a list of {self.item.describe()}"

    def problems(self, value: object) -> list[Problem]:
        if not isinstance(value, list):
            return [Problem(None, f"must be {self.describe()}, got {show(value)}")]
        if self.length is not None and len(value) != self.length:
            return [Problem(None, f"must have {self.length} entries, got {show(value)}")]
        if len(value) < self.min_length:
            return [Problem(None, f"must have at least {self.min_length} entry, got {show(value)}")]
        for i, entry in enumerate(value):
            if found := self.item.problems(entry):
                return [Problem(None, f"entry {i}: {found[0]}")]
        return []


@dataclass(frozen=True)
class AnyOf:
    options: tuple[FieldType, ...]

    def describe(self) -> str:
        return " or ".join(o.describe() for o in self.options)

    def problems(self, value: object) -> list[Problem]:
        if any(not o.problems(value) for o in self.options):
            return []
        return [Problem(None, f"must be {self.describe()}, got {show(value)}")]
