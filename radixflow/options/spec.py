"""How one option is declared (`OptionSpec`, `option`) and the strict check of a value against it.

An options dataclass (`EngineOptions`, the server's `ServerConfig`) declares each field once with
`option(default, help, kind, ...)`; the command-line flags, the mapping form (`checked`) and the
field-by-field check (`fields_problem`) all read that one declaration.
"""

from __future__ import annotations

import dataclasses
import math
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from radixflow.options.numerals import Written
from radixflow.options.sizes import EXAMPLES, MAX_MEMORY, Bytes, parse_size, read_size, show_size
from radixflow.problems import Problem, ProblemError, number_problem, plain, shown

T = TypeVar("T")


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
    flag: str | None = None  # the flag, where it is not the field's name (``drain_s``: --drain-timeout)
    show_default: bool = True  # False: the help says what the default is (a door decides it)
    # what a number outside [low, high] is told, in place of the bound it crossed: the words
    # another door uses for the same value (the seed: a request's own seed's)
    range_words: str | None = None


def option(default: Any, help: str, kind: type, **spec: Any) -> Any:
    """A dataclass field declared with its `OptionSpec`: the one declaration of its default."""
    return field(default=default, metadata={"spec": OptionSpec(help, kind, **spec)})


def spec_of(f: dataclasses.Field[Any]) -> OptionSpec:
    return f.metadata["spec"]


def fields_problem(options: Any) -> Problem | None:
    """The first field of an options dataclass whose value its spec refuses (None: all fine)."""
    for f in dataclasses.fields(options):
        problem = check_value(f.name, getattr(options, f.name), spec_of(f), f.default is None)
        if problem is not None:
            return problem
    return None


def checked(cls: type[T], data: Mapping[str, Any]) -> T:
    """An options dataclass from a mapping of field names; values must have the field's type (an
    int field given 4.5, "4" or True is refused, not cast). `ProblemError` names the first bad key."""
    known = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    # a number of numpy's (a sweep's np.arange) as the Python int or float it is, as
    # `SamplingParams` takes one: "must be an integer, got np.int64(64)" said 64 is none
    # (a `Written` float, 1e400 as typed, as it is: refused, in the words the user wrote)
    data = {key: value if isinstance(value, Written) else plain(value) for key, value in data.items()}
    for key, value in data.items():
        if key not in known:
            raise ProblemError(Problem(key, f"unknown option (known: {', '.join(known)})"))
        problem = check_value(key, value, spec_of(known[key]), known[key].default is None)
        if problem is not None:
            raise ProblemError(problem)
    return cls(**data)


def show(x: float) -> str:
    """A limit as a user types it: 3600000, not 3.6e+06; 1e-06 stays short; an integer limit
    exactly (the seed's 18446744073709551615, not 1.84467e+19)."""
    if isinstance(x, int):
        return str(x)
    return str(int(x)) if x == int(x) and abs(x) < 1e16 else f"{x:g}"


def type_problem(
    name: str, value: Any, kind: type, optional: bool, choices: Callable[[], Sequence[str]] | None = None
) -> Problem | None:
    """Strict types: an int is not a float's stand-in, a bool is not an int, nothing is cast.
    ``choices``: a string option's names, which a number quoted is not told to become."""
    if value is None and optional:
        return None  # an explicit None is refused below as any value of the wrong kind is
    if kind is Bytes:  # bytes, or a size's text (`in_bytes`)
        ok = isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))
        return None if ok else Problem(name, f"must be {EXAMPLES}, got {shown(value)}")
    if kind in (int, float):
        return number_problem(name, value, kind is int)
    if kind is str and not isinstance(value, str):  # not "a str": Python's name for it
        number = isinstance(value, int | float) and not isinstance(value, bool)
        # a TOML size in bytes, 2147483648, is one quoted; `dtype = 16` is no dtype quoted either
        text = shown(value)  # a number cut short ("... (301 digits)") is not one to quote
        quoted = number and " " not in text and (choices is None or text in choices())
        hint = f' (quote it: "{text}")' if quoted else ""
        return Problem(name, f"must be a string, got {text}{hint}")
    if not isinstance(value, kind):
        return Problem(name, f"must be a {kind.__name__}, got {shown(value)}")
    return None


def range_problem(
    name: str, value: float, low: float | None, high: float | None, words: str | None = None
) -> Problem | None:
    outside = (low is not None and value < low) or (high is not None and value > high)
    if outside and words is not None:
        return Problem(name, f"{words}, got {shown(value)}")
    if low is not None and value < low:
        return Problem(name, f"must be at least {show(low)}, got {shown(value)}")  # one wording, 0 too
    if high is not None and value > high:
        return Problem(name, f"must be at most {show(high)}, got {shown(value)}")
    return None


def check_value(name: str, value: Any, spec: OptionSpec, optional: bool) -> Problem | None:
    """Why ``value`` is not a valid ``name`` (None when it is). Pure."""
    problem = type_problem(name, value, spec.kind, optional, spec.choices)
    if problem is not None or value is None:
        return problem
    if spec.kind is Bytes:
        return _bytes_problem(name, value, spec)
    if spec.kind in (int, float):
        return range_problem(name, value, spec.low, spec.high, spec.range_words)
    if spec.kind is str and not value.strip():
        return Problem(name, "must not be empty")
    if spec.kind is str and "\x00" in value:  # no file, model or host name holds one; os calls refuse it
        return Problem(name, f"{shown(value)} contains a NUL character")
    if spec.choices is not None and value not in spec.choices():
        return Problem(name, f"unknown {name} {shown(value)} (known: {', '.join(spec.choices())})")
    return None


def _bytes_problem(name: str, value: int | str, spec: OptionSpec) -> Problem | None:
    """Why a `Bytes` option's ``value`` is not a size within its range, which is said in sizes
    (as its help says it), with the value as given: not parse_size's own bound (1PiB), nor bytes
    the user did not type."""
    size = value if isinstance(value, int) else read_size(value)
    if isinstance(size, Problem):
        return Problem(name, size.message)
    low, high = spec.low or 1, spec.high or MAX_MEMORY
    if size > high or int(size) < low:  # a fraction of a byte is dropped, as parse_size drops it
        return Problem(
            name, f"must be from {show_size(int(low))} to {show_size(int(high))}, got {shown(value)}"
        )
    return None


def in_bytes(value: int | str) -> int | Problem:
    """A `Bytes` option's value in bytes: an integer as it is, text as `parse_size` reads it
    (`cache_memory`'s parser: one wording of a bad size everywhere). Pure."""
    return value if isinstance(value, int) else parse_size(value)


def numbers_as_held(options: Any) -> None:
    """Hold the numbers of ``options`` (a frozen options dataclass, from its ``__post_init__``) as
    the mapping door (`checked`) and the flags hold them: numpy's as Python's (`plain`:
    ``ServerConfig(max_pending=np.int64(5))``), and a float field's integer or typed float as a
    plain float (``LLM(tflops=100)`` and a TOML cell's ``tflops = 100`` as ``--tflops 100``
    holds it, so no record or JSON says 100 at one door and 100.0 at another). A bool, or a
    number no float holds, stays as it is, for the check."""
    for f in dataclasses.fields(options):
        value = getattr(options, f.name)
        held = value if isinstance(value, Written) else plain(value)
        if spec_of(f).kind is float and _float_as_float(held):
            held = float(held)
        if held is not value:
            object.__setattr__(options, f.name, held)


def _float_as_float(value: Any) -> bool:
    """Whether ``value`` is held as a plain float: an integer a float holds, or a flag's float
    as typed (`Written`) that is finite."""
    if type(value) is int:
        return abs(value) <= sys.float_info.max
    return isinstance(value, Written) and math.isfinite(value)


def sizes_in_bytes(options: Any) -> None:
    """Check ``options`` (a frozen options dataclass, from its ``__post_init__``: a door that makes
    it directly is refused as the flags are) and hold each `Bytes` field given as text in bytes
    (and each float field given an integer as a float: `numbers_as_held`)."""
    numbers_as_held(options)
    problem = fields_problem(options)
    if problem is not None:
        raise ProblemError(problem)
    for f in dataclasses.fields(options):
        value = getattr(options, f.name)
        if spec_of(f).kind is Bytes and isinstance(value, str):
            object.__setattr__(options, f.name, in_bytes(value))  # checked above: an int
