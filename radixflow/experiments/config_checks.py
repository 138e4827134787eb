"""Checks of an experiment config's single values, names and lists, before any cell is expanded.

The experiment's name becomes a directory (``results/<name>``), so only a plain file name passes;
grid names label the report, so each is one printable line and no two grids share one; no list
(policies, seeds, a swept key's values) names the same thing twice; and the grid's size is known
from its lists' lengths, so a grid too large to run by accident is refused before it is expanded.
Also here: `--seeds` as the command line gives it, a workload value."""

from __future__ import annotations

import ast
import json
import math
import re
from collections.abc import Hashable
from pathlib import Path
from typing import Any

from radixflow.options import option_problem
from radixflow.problems import NOT_FINITE, shown

MAX_SEEDS = 1000  # seeds one `--seeds` may name: a grid times more is not a run to start by accident
MAX_NAME = 100  # characters in an experiment or grid name
SAFE_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]*")
SAFE_HELP = "ASCII letters, digits, '-', '_' and '.' (not first): it names the directory results/<name>"


class ExperimentConfigError(ValueError):
    """A config mistake, reported as one line naming the key."""


# a Python bool in a value quoted back ("got True"), or a quoted string (left as it is)
_PY_BOOL = re.compile(r"""('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")|\b(True|False)\b""")


def fail(origin: str, key: str, why: str) -> ExperimentConfigError:
    return ExperimentConfigError(f"{origin}: {key}: {toml_spelled(why)}")


def toml_spelled(why: str) -> str:
    """``why`` with the value it quotes back (after its last "got ") spelled as TOML spells it:
    the checks are the options' (shared with LLM's keywords), which quote Python's ``True`` and
    ``{'a': 1}``, which a TOML file given them back refuses. A table or an array is written out
    again (`_toml`); else a bool is ``true``, and strings quoted in the value stay."""
    head, got, value = why.rpartition("got ")
    if not got:
        return why
    try:
        parsed = ast.literal_eval(value)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):  # cut short, a hint after it
        parsed = None
    if isinstance(parsed, dict | list):
        return head + got + _toml(parsed)
    spelled = _PY_BOOL.sub(lambda m: m.group(1) or m.group(2).lower(), value)
    return head + got + spelled


def _toml(value: object) -> str:
    """``value`` (what tomllib reads: a table, an array, a string, a number, a bool) as TOML
    writes it; a string as Python quotes it where that is TOML too (no escape in it)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        quoted = repr(value)
        return quoted if "\\" not in quoted else json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ", ".join(map(_toml, value)) + "]"
    if isinstance(value, dict):
        pairs = (f"{_toml_key(k)} = {_toml(v)}" for k, v in value.items())
        return "{" + ", ".join(pairs) + "}"
    return repr(value)


def _toml_key(key: object) -> str:
    """A table's key, bare where TOML allows it."""
    bare = isinstance(key, str) and re.fullmatch(r"[A-Za-z0-9_-]+", key) is not None
    return str(key) if bare else _toml(str(key))


def experiment_name(data: dict[str, Any], origin: str) -> str:
    """The ``name`` key, else the config file's stem; either way a plain directory name."""
    if "name" not in data:
        stem = Path(origin).stem
        if not _safe(stem):
            raise fail(
                origin, "name", f"not given, and the file's name {shown(stem)} is not one ({SAFE_HELP})"
            )
        return stem
    name = data["name"]
    if not isinstance(name, str):
        raise fail(origin, "name", f"must be a string, got {shown(name)}")
    if not name:
        raise fail(origin, "name", "must not be empty")
    if not _safe(name):
        raise fail(origin, "name", f"{shown(name)} is not a plain name ({SAFE_HELP})")
    return name


def _safe(name: str) -> bool:
    return len(name) <= MAX_NAME and SAFE_NAME.fullmatch(name) is not None


def description(data: dict[str, Any], origin: str) -> str:
    text = data.get("description", "")
    if not isinstance(text, str):
        raise fail(origin, "description", f"must be a string, got {shown(text)}")
    return text


def grid_name(grid: dict[str, Any], where: str, origin: str, taken: dict[str, str]) -> str:
    """The grid's ``name`` (default: ``where``), one printable line no earlier grid has; ``taken``
    maps the names seen so far to their grids and gains this one."""
    name = grid.get("name", where)
    key = f"{where}.name"
    if not isinstance(name, str):
        raise fail(origin, key, f"must be a string, got {shown(name)}")
    if not name.strip():
        raise fail(origin, key, "must not be empty")
    if not name.isprintable() or len(name) > MAX_NAME:
        raise fail(
            origin, key, f"must be one line of at most {MAX_NAME} printable characters, got {shown(name)}"
        )
    if name in taken:
        raise fail(origin, key, f"{shown(name)} is already the name of {taken[name]}")
    taken[name] = where
    return name


def no_repeats(values: list[Any], origin: str, key: str) -> None:
    """Refuse a list that names one value twice (1 and 1.0 are one value; true and 1 are not)."""
    seen: set[Hashable] = set()
    for value in values:
        identity = _identity(value)
        if identity in seen:
            raise fail(origin, key, f"{shown(value)} is listed twice")
        seen.add(identity)


def _identity(value: Any) -> Hashable:
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, int | float | str):
        return ("value", value)
    return ("other", repr(value))  # a table or an array: refused later as the wrong type


def seeds(value: Any, origin: str, key: str) -> list[int]:
    if not isinstance(value, list) or not value or any(type(s) is not int or s < 0 for s in value):
        raise fail(origin, key, "must be a non-empty list of integers >= 0")
    for seed in value:
        if (why := seed_bound(seed)) is not None:
            raise fail(origin, key, why)
    no_repeats(value, origin, key)
    return value


def seed_bound(seed: int) -> str | None:
    """Why ``seed`` (>= 0) cannot be a cell's seed (None: it can): past the engine's bound, told as
    bench's --seed is told, by the one declaration of the option."""
    problem = option_problem("seed", seed)
    return None if problem is None else problem.message


def seeded_size(cells: int, seeds: int, limit: int) -> None:
    """Refuse ``cells`` distinct cells on ``seeds`` seeds each (`--seeds`) if more than ``limit``."""
    total = cells * seeds
    if total > limit:
        raise ExperimentConfigError(
            f"--seeds: {total:,} cells ({cells:,} × {seeds:,} seeds), above the limit of {limit:,}; "
            f"pass --max-cells {total} to run them anyway"
        )


def grid_size(lists: list[list[Any]]) -> int:
    """Cells a grid expands to: the product of its lists' lengths."""
    return math.prod(len(values) for values in lists)


def grid_sizes(sizes: dict[str, int], limit: int, origin: str) -> None:
    """Refuse grids of more than ``limit`` cells in all (``sizes``: cells per grid): a run that
    large is asked for by name (`--max-cells`), not started by a slip of a list."""
    total = sum(sizes.values())
    if total <= limit:
        return
    largest = max(sizes, key=lambda where: sizes[where])
    raise fail(
        origin,
        "grid",
        f"expands to {total:,} cells ({largest}: {sizes[largest]:,}), above the limit of {limit:,}; "
        f"pass --max-cells {total} to run them anyway",
    )


def parse_seeds(text: str) -> list[int]:
    """``"3-9"``, ``"0,4,7"`` or both (``"0,3-5"``) as a list of distinct seeds, in order; raises
    ValueError with a one-line reason."""
    seeds: dict[int, None] = {}  # ordered and distinct
    for part in (p.strip() for p in text.split(",")):
        lo, sep, hi = part.partition("-")
        if not _digits(lo) or (sep and not _digits(hi)):
            raise ValueError(f"--seeds: {text!r} is not a list like 3-9 or 0,4,7 of integers >= 0")
        first, last = int(lo), int(hi) if sep else int(lo)
        if last < first:
            raise ValueError(f"--seeds: the range {part!r} runs backwards")
        if last - first >= MAX_SEEDS:  # refused before a range of billions is spelled out
            raise ValueError(f"--seeds: more than {MAX_SEEDS} seeds")
        if (why := seed_bound(last)) is not None:  # the range's largest: none is below 0
            raise ValueError(f"--seeds: {why}")
        seeds.update(dict.fromkeys(range(first, last + 1)))
        if len(seeds) > MAX_SEEDS:  # counted once spelled out: overlapping ranges name a seed once
            raise ValueError(f"--seeds: more than {MAX_SEEDS} seeds")
    return list(seeds)


def _digits(text: str) -> bool:
    return text.isascii() and text.isdigit()


TYPE_WORDS = {int: "an integer", str: "a string", float: "a number"}  # "an integer", as engine options say


def workload_value(origin: str, key: str, value: Any, kind: type | tuple[type, ...]) -> None:
    """A workload value: the type of its default, finite. Its least value is `WorkloadSpec`'s to
    name (1 for candidate_len, 1e-06 for rate): a bare "must be >= 0" led to a 0 refused again."""
    if isinstance(value, bool) or not isinstance(value, kind):
        name = TYPE_WORDS.get(kind, "a number") if isinstance(kind, type) else "a number"
        raise fail(origin, key, f"must be {name}, got {shown(value)}")
    if isinstance(value, float) and not math.isfinite(value):  # as every door says it
        raise fail(origin, key, f"{NOT_FINITE}, got {shown(value)}")
