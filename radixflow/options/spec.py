"""How one option is declared (`OptionSpec`) and the strict check of a value against it."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from radixflow.problems import Problem


@dataclass(frozen=True)
class OptionSpec:
    help: str
    kind: type  # the value's type (int, float, str); None is allowed where the default is None
    low: float | None = None
    high: float | None = None
    choices: Callable[[], Sequence[str]] | None = None  # a registry's names, read when checked
    group: str = "engine"  # where the flag is listed: model, scheduler, sim
    metavar: str | None = None
    aliases: tuple[str, ...] = ()  # other flag spellings (a documented older name)


def show(x: float) -> str:
    """A limit as a user types it: 3600000, not 3.6e+06; 1e-06 stays short."""
    return str(int(x)) if x == int(x) and abs(x) < 1e16 else f"{x:g}"


def type_problem(name: str, value: Any, kind: type, optional: bool) -> Problem | None:
    """Strict types: an int is not a float's stand-in, a bool is not an int, nothing is cast."""
    if value is None:
        return None if optional else Problem(name, "must be given, got nothing")
    if kind is float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        if ok and not math.isfinite(value):
            return Problem(name, f"must be a finite number, got {value!r}")
        return None if ok else Problem(name, f"must be a number, got {value!r}")
    if kind is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
        return None if ok else Problem(name, f"must be an integer, got {value!r}")
    if not isinstance(value, kind):
        return Problem(name, f"must be a {kind.__name__}, got {value!r}")
    return None


def range_problem(name: str, value: float, low: float | None, high: float | None) -> Problem | None:
    if low is not None and value < low:
        return Problem(name, f"must be {'>= 0' if low == 0 else f'at least {show(low)}'}, got {value!r}")
    if high is not None and value > high:
        return Problem(name, f"must be at most {show(high)}, got {value!r}")
    return None


def check_value(name: str, value: Any, spec: OptionSpec, optional: bool) -> Problem | None:
    """Why ``value`` is not a valid ``name`` (None when it is). Pure."""
    problem = type_problem(name, value, spec.kind, optional)
    if problem is not None or value is None:
        return problem
    if spec.kind in (int, float):
        return range_problem(name, value, spec.low, spec.high)
    if spec.kind is str and not value.strip():
        return Problem(name, "must not be empty")
    if spec.choices is not None and value not in spec.choices():
        return Problem(name, f"unknown {name} {value!r} (known: {', '.join(spec.choices())})")
    return None
