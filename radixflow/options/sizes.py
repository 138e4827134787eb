"""Memory sizes as a user writes them: ``2GiB``, ``512MB``, ``300M``, ``1073741824``."""

from __future__ import annotations

import math
import re

from radixflow.problems import Problem

# Decimal units are powers of 1000 (``M``, ``MB``), binary ones powers of 1024 (``Mi``, ``MiB``),
# as Kubernetes and IEC write them; a bare number is bytes.
_POWERS = {"": 0, "k": 1, "m": 2, "g": 3, "t": 4, "p": 5}
_SIZE = re.compile(r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([kmgtp]?)(i?)(b?)", re.IGNORECASE)
MAX_MEMORY = 1 << 50  # 1 PiB: far beyond any device, small enough for exact integer bytes
EXAMPLES = "a size like 2GiB, 512MB, 300M or 1073741824 (bytes)"


class Bytes:
    """The kind (`spec.OptionSpec.kind`) of an option that is a size in bytes: an integer of bytes,
    or text as `parse_size` reads it (``8MiB``); its options dataclass holds the integer
    (`spec.in_bytes`). The type is a marker, never made."""


def _shown(text: str) -> str:
    return repr(text if len(text) <= 40 else text[:37] + "...")


def read_size(text: str) -> float | Problem:
    """``text``'s bytes, whatever their number (inf for a thousand digits), or the `Problem` with
    how it is written (named ``size``: the caller renames it); `parse_size` bounds it. Pure."""
    m = _SIZE.fullmatch(text.strip())
    if text.strip().startswith("-"):  # a negative number, said as such
        return Problem("size", f"must be a positive size, got {_shown(text)}")
    if m is None or (m.group(3) and not m.group(2)):  # "iB" names no unit
        return Problem("size", f"must be {EXAMPLES}, got {_shown(text)}")
    number, power, binary = m.group(1), _POWERS[m.group(2).lower()], bool(m.group(3))
    value = float(number) * (1024 if binary else 1000) ** power
    if power == 0 and 1 <= value < math.inf and not value.is_integer():
        # "1.5" was taken as 1 byte and said back as "1B": a count of bytes has no fraction (with
        # a unit, the fraction of a byte dropped is under a thousandth of the size)
        return Problem("size", f"must be a whole number of bytes (or a size with a unit), got {_shown(text)}")
    return value


def parse_size(text: str) -> int | Problem:
    """``text`` in bytes, or the `Problem` with it (named ``size``: the caller renames it). Pure."""
    value = read_size(text)
    if isinstance(value, Problem):
        return value
    if value > MAX_MEMORY:
        return Problem("size", f"must be at most 1PiB, got {_shown(text)}")
    if value < 1:
        return Problem("size", f"must be at least one byte, got {_shown(text)}")
    return int(value)


def show_size(n: int, at_least: bool = False) -> str:
    """``n`` bytes in the largest binary unit that keeps three significant digits; ``at_least``:
    rounded up, so the size shown (a least budget asked for) parses to ``n`` bytes or more. Pure."""
    for unit, power in (("TiB", 4), ("GiB", 3), ("MiB", 2), ("KiB", 1)):
        if n >= 1024**power:
            value = n / 1024**power
            if not at_least:  # 1000 to 1023 units in whole ones: .3g said 1023KiB "1.02e+03KiB"
                return f"{value:.3g}{unit}" if value < 999.5 else f"{round(value)}{unit}"
            scale = 10 ** max(0, 3 - len(str(int(value))))  # three significant digits
            return f"{math.ceil(value * scale) / scale:g}{unit}"
    return f"{n}B"


def exact_size(n: int) -> str:
    """``n`` bytes as `show_size` writes them where that reads back as exactly ``n`` (``8MiB``),
    else the bare number of bytes: a limit the user set, said as they may have written it. Pure."""
    shown = show_size(n)
    return shown if parse_size(shown) == n else str(n)
