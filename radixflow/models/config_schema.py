"""What a model family reads from ``config.json``, declared as data and checked by one validator.

A family declares a `Schema`: the fields it reads (`ConfigField`: name, value type (`config_types`),
whether it is required, legacy spellings) and the relations between them (rules: a layer pattern
has one entry per layer, a head count divides another, a layer kind needs its fields).
`validate_config` checks a config dict against it and returns `Problem`s whose ``param`` is the key
as the file spells it.
Types are strict: an integer field given ``4.5``, ``32.0``, ``"32"`` or ``true`` is a problem,
never a cast. Keys a family does not declare are not looked at: Hugging Face configs carry many.

Pure Python (no torch): a config can be checked without building anything.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from radixflow.models.config_types import FieldType, show
from radixflow.problems import Problem


@dataclass(frozen=True)
class Table:
    """A JSON object checked against its own schema (e.g. ``rope_parameters``): the one value type
    that holds a `Schema`, so it lives beside the validator it calls."""

    schema: Schema

    def describe(self) -> str:
        return "an object"

    def problems(self, value: object) -> list[Problem]:
        if not isinstance(value, dict):
            return [Problem(None, f"must be an object, got {show(value)}")]
        return validate_config(self.schema, value)


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
