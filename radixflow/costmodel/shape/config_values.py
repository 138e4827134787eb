"""Values read from a Hugging Face ``config.json`` dict as the torch families read them: the
first of several spellings set, integers and positive sizes refused in one line naming the key
(`ValueError`), factors that must be numbers, lists that must be lists."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

Config = dict[str, Any]


def first_set(cfg: Config, names: tuple[str, ...], default: Any) -> Any:
    """The first of ``names`` the config sets, else ``default``: a null counts as unset and older
    key names follow the current one, as the torch families read their configs."""
    return next((cfg[n] for n in names if cfg.get(n) is not None), default)


def integer(cfg: Config, key: str | tuple[str, ...], default: Any = None) -> int:
    """The first of ``key`` (a name, or a name and its older spellings) the config sets, else
    ``default`` (neither: a KeyError naming it), as an integer, read as int() reads it ("12" is 12,
    2.0 is 2): a value int() cannot read failed in its own words ("invalid literal for int() with
    base 10: 'abc'"), naming no key, and a true was read as 1."""
    names = (key,) if isinstance(key, str) else key
    name = next((n for n in names if cfg.get(n) is not None), names[0])
    value = first_set(cfg, names, default)
    if value is None:
        raise KeyError(name)
    refused = ValueError(f"{name} must be an integer, got {shown(value)}")
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise refused
    try:
        return int(value)
    except ValueError:  # an infinity's OverflowError says what it is
        raise refused from None


def shown(value: Any) -> str:
    """``value`` as a message shows it: its repr, cut to 60 characters."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def positive(cfg: Config, key: str, default: Any = None) -> int:
    """``key`` (else ``default``; neither: a KeyError naming it) as a positive int: a size the
    readers divide by or step through layers by (a 0 there was a ZeroDivisionError naming no key)
    or derive other sizes from."""
    value = integer(cfg, key, default)
    if value < 1:
        raise ValueError(f"{key} must be at least 1, got {first_set(cfg, (key,), default)}")
    return value


def factor(cfg: Config, key: str, default: float) -> float:
    """``key`` (else ``default``) as the number a width is multiplied by: a string there
    multiplied a string ("2" x 3 is "222"), read back as an int of that many digits."""
    value = first_set(cfg, (key,), default)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{key} must be a number, got {shown(value)}")
    return value


def listed(cfg: Config, key: str, default: Sequence[Any]) -> Sequence[Any]:
    """``key`` (else ``default``) as the per-layer list it must be: a number there failed as "'int'
    object is not iterable", naming no key, and a string was read one layer per character."""
    value = first_set(cfg, (key,), default)
    if not isinstance(value, list | tuple | range):
        raise ValueError(f"{key} must be a list, got {shown(value)}")
    return value
