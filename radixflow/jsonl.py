"""JSONL input files: their numbered lines, each a JSON object (a leaf: any layer's file reader
may use it)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any


def numbered_lines(text: str) -> Iterator[tuple[int, str]]:
    """(1-based line number, line) of every non-blank line of ``text``, split at newlines only:
    `str.splitlines` also ends a line at U+2028 and the like, which a JSON string may hold
    unescaped."""
    for n, line in enumerate(text.split("\n"), 1):
        if line.strip():
            yield n, line


def json_object(line: str, fields: str) -> dict[str, Any]:
    """``line`` parsed as a JSON object; ValueError saying why not, in words a file's reader
    prefixes with where the line is (``fields``: what an object there holds, for the message)."""
    try:
        row = json.loads(line)
    except json.JSONDecodeError as e:
        raise ValueError(f"not valid JSON ({e.msg})") from None
    if not isinstance(row, dict):
        raise ValueError(f"expected a JSON object ({fields})")
    return row
