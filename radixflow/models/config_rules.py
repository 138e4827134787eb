"""Relations between config fields, declared per family in its `Schema` (see `config_schema`).

Each rule checks one relation on a config whose fields already have their types and names the key
at fault as the file spells it. Conditions (`HasLayer`, `Holds`, `Equals`, `Positive`) make a rule
apply only where the family reads the fields (an MoE's fields when the pattern has MoE layers, an
attention layer's heads when it has attention layers: transformers reads them nowhere else).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from radixflow.models.config_schema import Resolved, Rule
from radixflow.models.config_types import as_number, show
from radixflow.problems import Problem


@dataclass(frozen=True)
class LayerCount:
    """Each of ``fields`` that is set (a list, or a pattern string) has one entry per layer."""

    fields: tuple[str, ...]
    count: str = "num_hidden_layers"

    def check(self, config: Resolved) -> Problem | None:
        layers = config.get(self.count)
        for name in self.fields:
            value = config.get(name)
            if value is not None and layers is not None and len(value) != layers:
                what = "characters" if isinstance(value, str) else "entries"
                return Problem(config.key(name), f"has {len(value)} {what}, but {self.count} is {layers}")
        return None


@dataclass(frozen=True)
class Divides:
    """``divisor`` divides ``multiple`` evenly (heads into groups, KV heads into query heads)."""

    divisor: str
    multiple: str
    unless: str | None = None  # not checked when this field is set (e.g. an explicit head_dim)
    # what the code reads where a field is left out (Nemotron-H's 8 SSM groups, Falcon-H1's 128
    # SSM heads), checked as a given value is
    default: int | None = None
    multiple_default: int | None = None

    def check(self, config: Resolved) -> Problem | None:
        d, d_said = _value(config, self.divisor, self.default)
        m, m_said = _value(config, self.multiple, self.multiple_default)
        if d is None or m is None or (self.unless is not None and config.get(self.unless) is not None):
            return None
        if m % d == 0:
            return None
        when = f" when {self.unless} is not given" if self.unless else ""
        return Problem(
            config.key(self.divisor),
            f"must divide {config.key(self.multiple)} ({m_said}){when}, got {d_said}",
        )


def _value(config: Resolved, name: str, default: int | None) -> tuple[Any, str]:
    """``name``'s value, else ``default`` (None: unchecked), and the value in words."""
    value = config.get(name)
    if value is not None:
        return value, config.said(name)
    return default, f"{default} (its default)"


@dataclass(frozen=True)
class AtMost:
    """``field`` (a number, or each entry of a list of layer indices) is at most ``bound``, or with
    ``strict`` below it."""

    field: str
    bound: str
    strict: bool = False
    bound_default: int | None = None  # what the code reads where the bound is left out

    def check(self, config: Resolved) -> Problem | None:
        value, given = config.get(self.field), config.get(self.bound)
        bound = self.bound_default if given is None else as_number(given)
        if value is None or bound is None:
            return None
        # the bound as a number (transformers' tagged infinity too), said where it is a default
        default = given is None or config.key(self.bound) in config.defaulted
        said = f"{bound} (its default)" if default else f"{bound}"
        word = "below" if self.strict else "at most"
        for v in value if isinstance(value, list) else [value]:
            number = as_number(v)
            if number is not None and (number > bound or (self.strict and number == bound)):
                entry = f"entry {show(v)} " if isinstance(value, list) else ""
                got = "" if entry else f", got {config.said(self.field)}"
                return Problem(config.key(self.field), f"{entry}must be {word} {self.bound} ({said}){got}")
        return None


@dataclass(frozen=True)
class Allowed:
    """``field``, where set, is one of ``values``: the ones a part of the model supports, which
    ``why`` names (a value transformers accepts but our kernels do not run)."""

    field: str
    values: tuple[object, ...]
    why: str

    def check(self, config: Resolved) -> Problem | None:
        value = config.get(self.field)
        if value is None or value in self.values:
            return None
        allowed = ", ".join(map(show, self.values))
        return Problem(config.key(self.field), f"must be one of {allowed} ({self.why}), got {show(value)}")


@dataclass(frozen=True)
class OneOf:
    """At least one of ``fields`` is set (e.g. a layer pattern in one of two spellings)."""

    fields: tuple[str, ...]

    def check(self, config: Resolved) -> Problem | None:
        if any(config.get(name) is not None for name in self.fields):
            return None
        return Problem(self.fields[0], f"missing (the layer pattern: give {' or '.join(self.fields)})")


class Condition(Protocol):
    def holds(self, config: Resolved) -> bool:
        """Whether the rules under this condition apply to ``config``. Pure."""
        ...

    def describe(self, config: Resolved) -> str:
        """The condition in words, e.g. "the 'moe' layers" or "rope_type is \"llama3\""."""
        ...


@dataclass(frozen=True)
class HasLayer:
    kind: str

    def holds(self, config: Resolved) -> bool:
        return self.kind in config.kinds()

    def describe(self, config: Resolved) -> str:
        return f"the {self.kind!r} layers"


@dataclass(frozen=True)
class Holds:
    """A family's own reading of its config holds (e.g. "some layer is MoE"), said as ``words``."""

    test: Callable[[Mapping[str, Any]], bool]
    words: str

    def holds(self, config: Resolved) -> bool:
        return self.test(config.data)

    def describe(self, config: Resolved) -> str:
        return self.words


@dataclass(frozen=True)
class Equals:
    field: str
    values: tuple[object, ...]

    def holds(self, config: Resolved) -> bool:
        return config.get(self.field) in self.values

    def describe(self, config: Resolved) -> str:
        return f"{config.key(self.field)} {show(config.get(self.field))}"


@dataclass(frozen=True)
class Positive:
    field: str

    def holds(self, config: Resolved) -> bool:
        number = as_number(config.get(self.field))
        return number is not None and number > 0

    def describe(self, config: Resolved) -> str:
        return f"{config.key(self.field)} > 0"


@dataclass(frozen=True)
class RequiredWhen:
    """``fields`` must be set where ``condition`` holds (an MoE's sizes when it has MoE layers)."""

    fields: tuple[str, ...]
    condition: Condition

    def check(self, config: Resolved) -> Problem | None:
        if not self.condition.holds(config):
            return None
        for name in self.fields:
            if config.get(name) is None:
                return Problem(name, f"missing (needed for {self.condition.describe(config)})")
        return None


@dataclass(frozen=True)
class When:
    """``rule`` applies only where ``condition`` holds."""

    condition: Condition
    rule: Rule

    def check(self, config: Resolved) -> Problem | None:
        return self.rule.check(config) if self.condition.holds(config) else None


def each_when(condition: Condition, rules: tuple[Rule, ...]) -> tuple[Rule, ...]:
    """``rules``, each applying only where ``condition`` holds (a layer kind's relations)."""
    return tuple(When(condition, rule) for rule in rules)
