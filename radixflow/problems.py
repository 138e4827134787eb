"""`Problem`: why an input cannot be used, as data — the parameter it concerns and one line.

Every door (command line, experiment TOML, `radixflow.LLM(...)`, HTTP) reports problems found by
the same checks; each spells the parameter its own way (``--kv-blocks``, ``grid[0].kv_blocks``,
``kv_blocks``, the OpenAI ``param`` field), so nothing downstream parses prose to find it.

A leaf module: it imports nothing from radixflow, so every layer may use it.
"""

from __future__ import annotations

import datetime
import inspect
import math
import numbers
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Problem:
    # The parameter at fault by its canonical name (an `EngineOptions` field, a model-config field,
    # a request field such as ``prompt`` or ``max_tokens``); None when no single parameter is.
    param: str | None
    # One line that names the bad value, written to follow "<param>: " (or to stand alone).
    message: str
    # Other parameters the message names by their canonical names (``min_tokens``' limit names
    # ``max_tokens``): spelled as the door spells ``param`` (``--max-tokens`` on the command line)
    mentions: tuple[str, ...] = ()

    def __str__(self) -> str:
        return self.render()

    def render(self, spell: Callable[[str], str] | None = None) -> str:
        """The one-line text, with the parameter spelled as the door names it (default: as is)."""
        message = self._spelled(spell)
        if self.param is None:
            return message
        name = spell(self.param) if spell is not None else self.param
        return f"{name}: {message}"

    def of_item(self, label: str, spell: Callable[[str], str] | None = None) -> str:
        """The text for one item of several, e.g. ``prompt 1``: "prompt 1: is empty",
        "prompt 1: max_tokens: ..." (the item's own noun is not repeated; another parameter
        spelled as ``spell`` says)."""
        own = label.split(" ", 1)[0]
        item = Problem(self.param, self._spelled(spell))  # a parameter it mentions is no item
        return item.render(lambda p: label if p == own else f"{label}: {spell(p) if spell else p}")

    def within(self, param: str) -> Problem:
        """The same problem as part of a larger parameter (``workload`` + ``groups``)."""
        return Problem(param if self.param is None else f"{param}.{self.param}", self.message, self.mentions)

    def _spelled(self, spell: Callable[[str], str] | None) -> str:
        """The message with each parameter it mentions spelled as ``spell`` says (whole words)."""
        message = self.message
        for other in self.mentions if spell is not None else ():
            message = re.sub(rf"\b{re.escape(other)}\b", lambda _, o=other: spell(o), message)
        return message


class ProblemError(ValueError):
    """Raised where a problem cannot be returned (a constructor, a loader); carries the `Problem`."""

    def __init__(self, problem: Problem) -> None:
        super().__init__(str(problem))
        self.problem = problem


# How every door says a value is not of its kind (the command line's flags, `SamplingParams`, the
# options' checks, the server's strict bodies): one wording, each door adding ", got <value>".
NOT_A_NUMBER = "must be a number"
NOT_FINITE = "must be a finite number"
NOT_AN_INTEGER = "must be an integer"


SHOWN_CHARS = 40  # a value quoted back longer than this is cut: the message stays one line


def shown(value: object, limit: int = SHOWN_CHARS) -> str:
    """``value`` as a message quotes it back (its repr), cut where it is long: a huge integer as
    its first and last digits and how many it has, since Python gives none past 4300; a date or
    a time as ISO 8601 (and TOML) writes it. Pure."""
    if isinstance(value, int) and not isinstance(value, bool):
        digits = _digits(abs(value))
        if digits is None:
            return f"an integer of {_digit_count(abs(value))} digits"
        if len(digits) > limit:
            return f"{'-' if value < 0 else ''}{digits[:12]}...{digits[-4:]} ({len(digits)} digits)"
        return str(value)
    if isinstance(value, datetime.date | datetime.time):  # a TOML date or time, as TOML writes it
        return value.isoformat()  # (its repr, "datetime.datetime(1979, 5, 27, 7, 3...", was cut)
    text = _repr(value, limit)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _repr(value: object, limit: int) -> str:
    """``repr(value)``; a list or tuple holding an integer Python will not spell (repr raises) is
    spelled item by item as `shown` says each, until past ``limit``."""
    try:
        return repr(value)
    except ValueError:
        if not isinstance(value, list | tuple):
            raise
    parts: list[str] = []
    for item in value:
        parts.append(shown(item, limit))
        if sum(len(p) + 2 for p in parts) > limit:
            break
    ends = "[]" if isinstance(value, list) else "()"
    return ends[0] + ", ".join(parts) + ends[1]


def _digits(n: int) -> str | None:
    try:
        return str(n)
    except ValueError:  # past sys.get_int_max_str_digits()
        return None


def _digit_count(n: int) -> int:
    """Decimal digits of ``n`` >= 0, without converting it to a string."""
    count = max(1, int(n.bit_length() * math.log10(2)))  # within one of the true count
    return count + 1 if n >= 10**count else count


def plain(x: object) -> object:
    """A number of another library (numpy's int64, float32) as the Python int or float it is,
    so the checks read it as the number it is and seeds mix as Python ints, and numpy's bool as
    Python's (a flag taken from an array); a bool, a float that is no integer, a float as typed
    (the command line's: `typed_floats` holds it plain once checked), and anything else stay as
    they are, for the checks to name."""
    if x is None or isinstance(x, bool) or type(x) in (int, float):  # most fields: no ABC check
        return x
    if type(x).__module__ == "numpy" and type(x).__name__ in ("bool", "bool_"):  # 2.x, 1.x
        return bool(x)  # no ABC counts it a number (numpy imported only where a caller did)
    if isinstance(x, float) and isinstance(getattr(x, "text", None), str):
        return x  # a flag's number as typed (options.numerals.Written): a refusal quotes it so
    if isinstance(x, numbers.Integral):
        return int(x)
    if isinstance(x, numbers.Real):
        return float(x)
    return x


def number_problem(param: str, value: object, integer: bool = False) -> Problem | None:
    """Why ``value`` is not a finite number (``integer``: not an integer; a bool is neither), in
    the words every door uses; None when it is one. Pure."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return Problem(param, f"{NOT_AN_INTEGER if integer else NOT_A_NUMBER}, got {shown(value)}")
    if integer and not isinstance(value, int):
        return Problem(param, f"{NOT_AN_INTEGER}, got {shown(value)}")
    if isinstance(value, int):  # finite however long; math.isfinite would overflow past a float
        too_large = not integer and abs(value) > sys.float_info.max  # float(value) cannot hold it
        return Problem(param, f"{NOT_FINITE}, got {shown(value)}") if too_large else None
    if not math.isfinite(value):
        return Problem(param, f"{NOT_FINITE}, got {value!r}")
    return None


def flag(param: str) -> str:
    """A parameter as the command line spells it: ``kv_blocks`` -> ``--kv-blocks``."""
    return "--" + param.replace("_", "-")


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """``n`` and ``noun``, plural unless ``n`` is 1: "1 context", "2 contexts"."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"


def warn(message: str) -> None:
    """A one-line warning on stderr, as every command says one (the run goes on); here, a leaf,
    for the commands below the command line's package (calibrate's own, in `calibration`)."""
    # one write, its newline in it: print writes them apart, and another thread's line written
    # between the two ran on into this one (threads waiting for a plugin's import each say so)
    if sys.stderr is not None:  # none at all under pythonw, where print writes nothing
        sys.stderr.write(f"radixflow: warning: {message}\n")


def built(
    param: str, name: str, entry: object, protocol: type, args: tuple[object, ...] = (), takes: str = "()"
) -> Any:
    """What the registry entry ``name`` builds from ``args`` (``takes``: them as the message says),
    once it is known to serve as ``protocol``: an entry added from outside the package
    (docs/extending.md) that is no class or factory, cannot take ``args`` or builds something
    lacking one of the protocol's members is a `ProblemError` on ``param`` here, where the engine
    is built, not a traceback mid-run."""
    called = f"{name!r} ({getattr(entry, '__qualname__', type(entry).__qualname__)})"
    if not callable(entry):
        raise ProblemError(Problem(param, f"{called} is registered as an instance, not a class or factory"))
    try:
        inspect.signature(entry).bind(*args)
    except TypeError as e:
        raise ProblemError(Problem(param, f"{called} cannot be called as {takes}: {e}")) from None
    except ValueError:  # no signature to read (a builtin): calling it says what is wrong
        pass
    made = entry(*args)
    missing = [m for m in protocol_members(protocol) if not hasattr(made, m)]
    if missing:
        lacks = ", ".join(missing)
        raise ProblemError(Problem(param, f"{called} is no {protocol.__name__}: it lacks {lacks}"))
    # a method set to a value (`on_blocked = None`) is called mid-run: a TypeError's traceback there
    methods = (m for m, v in vars(protocol).items() if callable(v) and not m.startswith("_"))
    for m in sorted(m for m in methods if not callable(getattr(made, m))):
        said = f"its {m} is {shown(getattr(made, m))}, not a method"
        raise ProblemError(Problem(param, f"{called} is no {protocol.__name__}: {said}"))
    return made


def protocol_members(protocol: type) -> list[str]:
    """The attributes and methods ``protocol`` declares (a `typing.Protocol`), sorted. Pure."""
    methods = (n for n, v in vars(protocol).items() if callable(v) and not n.startswith("_"))
    return sorted({*getattr(protocol, "__annotations__", {}), *methods})
