"""One line of a JSONL input file as a JSON object (a leaf: any layer's file reader may use it)."""

from __future__ import annotations

import json
from typing import Any


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
