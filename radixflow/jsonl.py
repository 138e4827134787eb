"""JSONL input files: their UTF-8 text, their numbered lines, each a JSON object; any JSON
document a user gives, read with one ValueError for every way it is not JSON (a leaf: any layer's
file reader may use it)."""

from __future__ import annotations

import codecs
import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

UTF16_MARKS = (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)
STRAY_BOM = "a UTF-8 byte order mark starts this line; one may only start the file (files joined?)"
# why a document nested past the parser's recursion is not read, in every reader's words
TOO_DEEP = "nested too deeply"
# the first bytes of the compressed files a JSONL input is most often saved as
COMPRESSED = {
    b"\x1f\x8b": "gzip",
    b"(\xb5/\xfd": "zstd",
    b"BZh": "bzip2",
    b"\xfd7zXZ\x00": "xz",
    b"PK\x03\x04": "zip",
}


def first_line_kind(data: bytes) -> str | None:
    """What a file starting with ``data`` is, where that is why it is no UTF-8 text (None: no
    kind known): UTF-16, or a compressed file. Pure."""
    if data.startswith(UTF16_MARKS):  # Windows PowerShell 5's `>` writes it
        return "UTF-16: save it as UTF-8"
    kind = next((name for mark, name in COMPRESSED.items() if data.startswith(mark)), None)
    return None if kind is None else f"a {kind}-compressed file: decompress it first"


def read_text(path: Path) -> str:
    """``path``'s text, UTF-8 with any byte-order mark dropped (it is not part of line 1).
    OSError as reading raises; ValueError naming the line and column of a byte that is not
    UTF-8, in words a file's reader prefixes with the file (the decoder's own message gave an
    offset in the whole file, past a mark it did not count)."""
    data = path.read_bytes().removeprefix(codecs.BOM_UTF8)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        kind = first_line_kind(data) if line == 1 else None
        if kind is not None:
            raise ValueError(f"line 1: not UTF-8 text ({kind})") from None
        column = e.start - data.rfind(b"\n", 0, e.start)  # rfind: -1 on line 1
        byte = f"byte 0x{data[e.start]:02x} at column {column}"
        raise ValueError(f"line {line}: not UTF-8 text ({byte})") from None


def numbered_lines(text: str) -> Iterator[tuple[int, str]]:
    """(1-based line number, line) of every non-blank line of ``text``, split at newlines only:
    `str.splitlines` also ends a line at U+2028 and the like, which a JSON string may hold
    unescaped."""
    for n, line in enumerate(text.split("\n"), 1):
        if line.strip():
            yield n, line


def json_value(
    text: str | bytes, unique: bool = False, parse_float: Callable[[str], Any] | None = None
) -> Any:
    """``text``'s value, as ``json.loads`` reads it; a ValueError for every document it cannot
    read, also one nested past Python's recursion limit (the parser recurses per bracket and
    raised RecursionError, which the readers that catch ValueError for "not JSON" let out as a
    traceback: a garbled or hostile file). ``unique``: `KeyTwice` for a key an object gives
    twice, where JSON silently keeps its last value; ``parse_float``: as ``json.loads`` takes it."""
    try:
        return json.loads(text, object_pairs_hook=_once if unique else None, parse_float=parse_float)
    except RecursionError:
        raise ValueError(TOO_DEEP) from None


class KeyTwice(ValueError):
    """A key one JSON object gives twice (its only argument)."""


def _once(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object's pairs as a dict, none of its keys given twice (JSON itself keeps the last)."""
    row: dict[str, Any] = {}
    for key, value in pairs:
        if key in row:
            raise KeyTwice(key)
        row[key] = value
    return row


def json_object(
    line: str, fields: str, unique: bool = False, parse_float: Callable[[str], Any] | None = None
) -> dict[str, Any]:
    """``line`` parsed as a JSON object; ValueError saying why not, in words a file's reader
    prefixes with where the line is (``fields``: what an object there holds, for the message).
    ``unique``: a key given twice is refused, where JSON silently keeps its last value;
    ``parse_float``: as ``json.loads`` takes it (a float's text, kept where no float holds it)."""
    if line.startswith("\ufeff"):  # the file's own is dropped (`read_text`): json would say "use utf-8-sig"
        raise ValueError(STRAY_BOM)
    try:
        row = json.loads(line, object_pairs_hook=_once if unique else None, parse_float=parse_float)
    except KeyTwice as e:
        raise ValueError(f"field {e.args[0]!r} given twice") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"not valid JSON ({e.msg})") from None
    except RecursionError:  # the parser recurses per bracket: a garbled or hostile line
        raise ValueError(f"not valid JSON ({TOO_DEEP})") from None
    except ValueError:  # json.loads' other one: an integer past Python's limit on digits it reads
        raise ValueError(f"not valid JSON (a number of over {sys.get_int_max_str_digits()} digits)") from None
    if not isinstance(row, dict):
        raise ValueError(f"expected a JSON object ({fields})")
    return row
