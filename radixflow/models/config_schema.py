"""What a model family reads from ``config.json``, declared as data and checked by one validator.

A family declares a `Schema`: the fields it reads (`ConfigField`: name, value type, whether it is
required, legacy spellings) and the relations between them (rules: a layer pattern has one entry
per layer, a head count divides another, a layer kind needs its fields). `validate_config` checks
a config dict against it and returns `Problem`s whose ``param`` is the key as the file spells it.
Types are strict: an integer field given ``4.5``, ``32.0``, ``"32"`` or ``true`` is a problem,
never a cast. Keys a family does not declare are not looked at: Hugging Face configs carry many.

Pure Python (no torch): a config can be checked without building anything.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

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


# --------------------------------------------------------------------------- value types


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


@dataclass(frozen=True)
class Table:
    """A JSON object checked against its own schema (e.g. ``rope_parameters``)."""

    schema: Schema

    def describe(self) -> str:
        return "an object"

    def problems(self, value: object) -> list[Problem]:
        if not isinstance(value, dict):
            return [Problem(None, f"must be an object, got {show(value)}")]
        return validate_config(self.schema, value)


# --------------------------------------------------------------------------- fields and schema


@dataclass(frozen=True)
class ConfigField:
    name: str
    type: FieldType
    required: bool = False
    aliases: tuple[str, ...] = ()  # older spellings, read when ``name`` is unset (in this order)
    # spellings read before ``name``: transformers sets the field from them over its own value
    # (a config class's attribute_map, or older keyword arguments it takes over the field)
    read_first: tuple[str, ...] = ()

    def spellings(self) -> tuple[str, ...]:
        """Every key of this field, in the order a config is read."""
        return (*self.read_first, self.name, *self.aliases)


@dataclass(frozen=True)
class Resolved:
    """A config's declared fields after the type checks: the value of each (None when unset) and
    the key the file spells it with."""

    data: Mapping[str, Any]
    values: dict[str, Any]
    keys: dict[str, str]
    layer_kinds: Callable[[Mapping[str, Any]], list[str]] | None = None
    defaulted: frozenset[str] = frozenset()  # keys the family's defaults filled in, not the file

    def said(self, name: str) -> str:
        """``name``'s value in words, saying where config.json left it out, e.g. "4 (its default)"."""
        text = show(self.get(name))
        return f"{text} (its default)" if self.key(name) in self.defaulted else text

    def get(self, name: str) -> Any:
        return self.values.get(name)

    def key(self, name: str) -> str:
        return self.keys.get(name, name)

    def kinds(self) -> list[str]:
        """Each layer's kind, as the family reads its pattern (empty for a family without one)."""
        return self.layer_kinds(self.data) if self.layer_kinds is not None else []


class Rule(Protocol):
    def check(self, config: Resolved) -> Problem | None:
        """The relation's problem in ``config`` (every field already of its type), or None. Pure."""
        ...


@dataclass(frozen=True)
class Schema:
    fields: tuple[ConfigField, ...]
    rules: tuple[Rule, ...] = ()
    # the family's own reading of its layer pattern, for rules about layer kinds
    layer_kinds: Callable[[Mapping[str, Any]], list[str]] | None = None

    def merged(self, *others: Schema) -> Schema:
        """This schema and ``others`` together; a field declared again replaces the earlier one."""
        by_name = {f.name: f for s in (self, *others) for f in s.fields}
        rules = tuple(r for s in (self, *others) for r in s.rules)
        kinds = next((s.layer_kinds for s in (*others[::-1], self) if s.layer_kinds is not None), None)
        return Schema(tuple(by_name.values()), rules, kinds)


def validate_config(
    schema: Schema, data: Mapping[str, Any], defaults: Mapping[str, Any] | None = None
) -> list[Problem]:
    """Every field's type problems; if there are none, the first broken relation (relations between
    mistyped fields mean nothing). Empty when ``data`` is a config the family can build.
    ``defaults``: what the family fills in for a key ``data`` leaves out (its ``config_defaults``),
    checked as given values are; a problem naming one says it is the default."""
    defaulted = frozenset(k for k in defaults or {} if k not in data)
    data = {**(defaults or {}), **data}
    values: dict[str, Any] = {}
    keys: dict[str, str] = {}
    problems: list[Problem] = []
    for f in schema.fields:
        key = next((k for k in f.spellings() if data.get(k) is not None), None)
        if key is None:
            if f.required:
                problems.append(Problem(f.name, f"missing (must be {f.type.describe()})"))
            continue
        values[f.name], keys[f.name] = data[key], key
        problems += [p.within(key) for p in f.type.problems(data[key])]
    if problems:
        return problems
    resolved = Resolved(data, values, keys, schema.layer_kinds, defaulted)
    for rule in schema.rules:
        if (problem := rule.check(resolved)) is not None:
            return [problem]
    return []
